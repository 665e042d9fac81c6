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
// Columns: attnkit's float32 kernel, the int8 row kernel (gemm_int8_rows), and the int8 panel
// kernel (gemm_int8_panels on the weight packed once, pack_int8_panels; the activations'
// offset_rows_uint8 included), µs per call. Shapes: SmolLM2-135M's (576…49152) and
// Marian's (512…58101). `--shapes marian` / `smollm2` picks one set.
#include <cstring>
int main(int argc, char** argv){
  std::vector<std::pair<int,int>> shapes={{576,576},{192,576},{1536,576},{576,1536},{49152,576}};
  if (argc > 2 && std::strcmp(argv[2], "marian") == 0) shapes={{512,512},{2048,512},{512,2048},{58101,512}};
  std::mt19937 g(1); std::normal_distribution<float> nd;
  for (int M : {1,4,16,64}) for (auto& s: shapes){ int out=s.first, in=s.second;
    std::vector<float> W(size_t(out)*in), x(size_t(M)*in), y(size_t(M)*out), ws(out), xs(M);
    for(auto&v:W)v=nd(g); for(auto&v:x)v=nd(g);
    std::vector<int8_t> Wq(W.size()), xq(x.size());
    quantize_rows_int8(W.data(), in, out, in, Wq.data(), ws.data());
    auto t=[&](auto f){double best=1e9; for(int r=0;r<5;r++){auto a=std::chrono::steady_clock::now(); for(int k=0;k<10;k++) f(); double d=std::chrono::duration<double>(std::chrono::steady_clock::now()-a).count()/10; if(d<best)best=d;} return best*1e6;};
    double tf=t([&]{ if(M==1) gemv_rows(W.data(),in,x.data(),in,nullptr,y.data(),0,out); else gemm_few_rows(W.data(),in,x.data(),in,M,in,nullptr,y.data(),out,0,out);});
    double tq=t([&]{ quantize_rows_int8(x.data(),in,M,in,xq.data(),xs.data()); gemm_int8_rows(Wq.data(),in,ws.data(),xq.data(),xs.data(),M,nullptr,y.data(),out,0,out);});
    std::vector<int8_t> P(size_t(int8_panel_bytes(out,in))); std::vector<int32_t> sums(out);
    std::vector<uint8_t> xu(size_t(M)*int8_panel_groups(in)*4);
    pack_int8_panels(Wq.data(),out,in,P.data(),sums.data(),0,int8_panel_count(out));
    double tp=t([&]{ quantize_rows_int8(x.data(),in,M,in,xq.data(),xs.data()); offset_rows_uint8(xq.data(),M,in,xu.data()); gemm_int8_panels(P.data(),sums.data(),out,in,ws.data(),xu.data(),xs.data(),M,nullptr,y.data(),out,0,int8_panel_count(out));});
    printf("M=%d %dx%d f32 %.0fus int8 rows %.0fus panels %.0fus\n",M,out,in,tf,tq,tp);
  }}
