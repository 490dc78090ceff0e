// Fills in the token ids of hf_golden.json with Hugging Face tokenizers.
//
//   npm install tokenizers@0.23.2   (the official Node binding of the Rust library)
//   node hf_golden.js hf_golden.json
//
// For each variant, the tokenizer is the file's "tokenizer" with the
// variant's "override" keys replaced; each case's "ids" become what
// tokenizers encodes its "text" to, without special tokens added.
const { Tokenizer } = require('tokenizers');
const fs = require('fs');
const os = require('os');
const path = require('path');

const file = process.argv[2];
const golden = JSON.parse(fs.readFileSync(file, 'utf8'));
const tmp = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'hf-golden-')), 'tokenizer.json');

(async () => {
  for (const v of golden.variants) {
    fs.writeFileSync(tmp, JSON.stringify({ ...golden.tokenizer, ...v.override }));
    const tok = Tokenizer.fromFile(tmp);
    for (const c of v.cases) {
      const enc = await tok.encode(c.text, null, { addSpecialTokens: false });
      c.ids = enc.getIds();
    }
  }
  golden.generator = 'tokenizers ' + require('tokenizers/package.json').version + ' (Node binding), hf_golden.js';
  // One line per id list keeps the file readable.
  const text = JSON.stringify(golden, null, 1).replace(/\[\s+([\d,\s]+?)\s+\]/g, (_, ids) => '[' + ids.replace(/\s+/g, '') + ']');
  fs.writeFileSync(file, text + '\n');
})();
