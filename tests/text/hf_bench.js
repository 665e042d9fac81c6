// Throughput of Hugging Face tokenizers (Node bindings) for tests/text/tokenizer_bench.cpp.
// Usage: node hf_bench.js TOKENIZER.json LINES.json NODE_MODULES_DIR REPEATS
// Prints {"seconds": best wall time of encodeBatch over all lines, "tokens": token count}.
// Run with RAYON_NUM_THREADS=1 for the single-thread figure.
'use strict';
const fs = require('fs');
const path = require('path');

const [tokenizerPath, linesPath, modulesDir, repeatsText] = process.argv.slice(2);
const hf = require(path.join(modulesDir, '@anush008', 'tokenizers'));
const tokenizer = hf.Tokenizer.fromFile(tokenizerPath);
const lines = JSON.parse(fs.readFileSync(linesPath, 'utf8'));

async function main() {
  let best = Infinity;
  let tokens = 0;
  await tokenizer.encodeBatch(lines.slice(0, 100), { addSpecialTokens: false });  // warm-up
  for (let r = 0; r < Number(repeatsText || 3); ++r) {
    const start = process.hrtime.bigint();
    const encodings = await tokenizer.encodeBatch(lines, { addSpecialTokens: false });
    const seconds = Number(process.hrtime.bigint() - start) / 1e9;
    tokens = encodings.reduce((sum, encoding) => sum + encoding.getLength(), 0);
    best = Math.min(best, seconds);
  }
  process.stdout.write(JSON.stringify({ seconds: best, tokens }));
}

main().catch((error) => {
  process.stderr.write(`hf_bench.js: ${error}\n`);
  process.exit(1);
});
