// Standalone probe of the int8 kernel against the float32 gemv / few-rows kernels (docs/decoding.md
// "int8"; not a CMake target). Build and run from the repository root:
//   g++ -std=c++17 -O3 -ffp-contract=fast -Wno-psabi -Isrc/ops/cpu -Iinclude bench/int8_kernel_probe.cpp \
//       src/ops/cpu/int8_gemm_kernel.cpp src/ops/cpu/gemv_kernel.cpp src/ops/cpu/kernel_isa.cpp src/base/*.cpp -lfmt -o /tmp/int8_kernel_probe
#include "int8_gemm_kernel.h"
#include "gemv_kernel.h"
#include <chrono>
#include <cstdio>
#include <vector>
#include <random>
using namespace attnkit::ops::cpu;
int main(){
  int shapes[][2]={{576,576},{192,576},{1536,576},{576,1536},{49152,576}};
  std::mt19937 g(1); std::normal_distribution<float> nd;
  for (int M : {1,4,16}) for (auto& s: shapes){ int out=s[0], in=s[1];
    std::vector<float> W(size_t(out)*in), x(size_t(M)*in), y(size_t(M)*out), ws(out), xs(M);
    for(auto&v:W)v=nd(g); for(auto&v:x)v=nd(g);
    std::vector<int8_t> Wq(W.size()), xq(x.size());
    quantize_rows_int8(W.data(), in, out, in, Wq.data(), ws.data());
    auto t=[&](auto f){double best=1e9; for(int r=0;r<5;r++){auto a=std::chrono::steady_clock::now(); for(int k=0;k<10;k++) f(); double d=std::chrono::duration<double>(std::chrono::steady_clock::now()-a).count()/10; if(d<best)best=d;} return best*1e6;};
    double tf=t([&]{ if(M==1) gemv_rows(W.data(),in,x.data(),in,nullptr,y.data(),0,out); else gemm_few_rows(W.data(),in,x.data(),in,M,in,nullptr,y.data(),out,0,out);});
    double tq=t([&]{ quantize_rows_int8(x.data(),in,M,in,xq.data(),xs.data()); gemm_int8_rows(Wq.data(),in,ws.data(),xq.data(),xs.data(),M,nullptr,y.data(),out,0,out);});
    printf("M=%d %dx%d f32 %.0fus int8 %.0fus\n",M,out,in,tf,tq);
  }}
