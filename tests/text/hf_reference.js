// Reference encoder for tests/text: runs Hugging Face tokenizers (Rust core, Node bindings
// @anush008/tokenizers) on a request and prints the results as JSON.
//
// Usage: node hf_reference.js REQUEST.json NODE_MODULES_DIR
// REQUEST: {
//   "tokenizer": {"file": "tokenizer.json"}
//              | {"wordpiece": {"vocab": "vocab.txt", "lowercase": true}}
//              | {"bpe": {"vocab": "vocab.json", "merges": "merges.txt", "trim_offsets": false}},
//   "save": "out.json"                  (optional: write the built tokenizer as tokenizer.json)
//   "inputs": [["text"], ["first", "second"], ...],
//   "batch": false                      (true: encodeBatch on single texts, for batch padding)
//   "add_special_tokens": true,
//   "decode": [[ids...], ...], "skip_special_tokens": true
// }
// Output: {"encodings": [{"ids", "type_ids", "tokens", "offsets", "attention_mask",
//          "special_tokens_mask"}], "decoded": [...]}
'use strict';
const fs = require('fs');
const path = require('path');

const [requestPath, modulesDir] = process.argv.slice(2);
const hf = require(path.join(modulesDir, '@anush008', 'tokenizers'));
const request = JSON.parse(fs.readFileSync(requestPath, 'utf8'));

async function buildTokenizer(spec) {
  if (spec.file) return hf.Tokenizer.fromFile(spec.file);
  if (spec.wordpiece) {
    const model = await hf.WordPiece.fromFile(spec.wordpiece.vocab, { unkToken: '[UNK]' });
    const tokenizer = new hf.Tokenizer(model);
    tokenizer.setNormalizer(hf.bertNormalizer({ lowercase: spec.wordpiece.lowercase }));
    tokenizer.setPreTokenizer(hf.bertPreTokenizer());
    tokenizer.setDecoder(hf.wordPieceDecoder());
    tokenizer.addSpecialTokens(['[PAD]', '[UNK]', '[CLS]', '[SEP]', '[MASK]']);
    tokenizer.setPostProcessor(hf.bertProcessing(['[SEP]', tokenizer.tokenToId('[SEP]')],
                                                 ['[CLS]', tokenizer.tokenToId('[CLS]')]));
    return tokenizer;
  }
  if (spec.bpe) {
    const model = await hf.BPE.fromFile(spec.bpe.vocab, spec.bpe.merges);
    const tokenizer = new hf.Tokenizer(model);
    tokenizer.setPreTokenizer(hf.byteLevelPreTokenizer(false, true));
    tokenizer.setPostProcessor(hf.byteLevelProcessing(Boolean(spec.bpe.trim_offsets)));
    if (tokenizer.tokenToId('<|endoftext|>') !== null) tokenizer.addSpecialTokens(['<|endoftext|>']);
    // These bindings export no ByteLevel decoder: set it in the JSON and reload.
    const json = JSON.parse(saveToString(tokenizer));
    json.decoder = { type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true };
    return hf.Tokenizer.fromString(JSON.stringify(json));
  }
  throw new Error('request.tokenizer: expected file, wordpiece or bpe');
}

function saveToString(tokenizer) {
  const file = path.join(path.dirname(requestPath), `hf_build_${process.pid}.json`);
  tokenizer.save(file, false);
  const text = fs.readFileSync(file, 'utf8');
  fs.unlinkSync(file);
  return text;
}

function plain(encoding) {
  return {
    ids: encoding.getIds(),
    type_ids: encoding.getTypeIds(),
    tokens: encoding.getTokens(),
    offsets: encoding.getOffsets(),
    attention_mask: encoding.getAttentionMask(),
    special_tokens_mask: encoding.getSpecialTokensMask(),
  };
}

async function main() {
  const tokenizer = await buildTokenizer(request.tokenizer);
  if (request.save) tokenizer.save(request.save, true);
  const options = { addSpecialTokens: request.add_special_tokens !== false };
  const out = { encodings: [], decoded: [] };
  const inputs = request.inputs || [];
  if (request.batch) {
    const encodings = await tokenizer.encodeBatch(inputs.map((input) => input[0]), options);
    out.encodings = encodings.map(plain);
  } else {
    for (const input of inputs) {
      out.encodings.push(plain(await tokenizer.encode(input[0], input.length > 1 ? input[1] : null, options)));
    }
  }
  for (const ids of request.decode || []) {
    out.decoded.push(await tokenizer.decode(ids, request.skip_special_tokens !== false));
  }
  process.stdout.write(JSON.stringify(out));
}

main().catch((error) => {
  process.stderr.write(`hf_reference.js: ${error && error.stack ? error.stack : error}\n`);
  process.exit(1);
});
