// Evaluates token-id prompts with llama.cpp (through node-llama-cpp's
// prebuilt CPU libraries) and prints the raw logits at every position as
// JSON: {"logits": [prompt][position][vocab]}.
//
// usage: node llama_logits.mjs NODE_LLAMA_CPP_DIR MODEL.gguf PROMPTS.json
// NODE_LLAMA_CPP_DIR holds node_modules/node-llama-cpp; PROMPTS.json is a
// list of token-id lists.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const [dir, modelPath, promptsPath] = process.argv.slice(2);
const { getLlama, LlamaLogLevel } = await import(pathToFileURL(join(dir, "node_modules/node-llama-cpp/dist/index.js")).href);
const prompts = JSON.parse(readFileSync(promptsPath, "utf8"));
const llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error });
const model = await llama.loadModel({ modelPath });
const out = [];
for (const ids of prompts) {
  const context = await model.createContext({ contextSize: 512, sequences: 1 });
  const seq = context.getSequence();
  const items = ids.map((t) => [t, { generateNext: { logits: true } }]);
  const res = await seq.controlledEvaluate(items);
  const rows = [];
  for (const r of res) {
    const m = r.next.logits;
    const row = new Array(m.size);
    for (const [tok, v] of m) row[tok] = v;
    rows.push(row);
  }
  out.push(rows);
  await context.dispose();
}
process.stdout.write(JSON.stringify({ logits: out }));
await model.dispose();
await llama.dispose();
