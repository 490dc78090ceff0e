// Package tokenizer encodes and decodes text with the Hugging Face
// tokenizer.json files DeepSeek ships with its checkpoints: byte-level BPE
// behind a pre-tokenizer of regex Splits.
//
// The pipeline follows the Hugging Face tokenizers library step by step:
// added tokens are cut out of the input first (leftmost-longest, with their
// lstrip, rstrip, single_word and normalized flags), the remaining text is
// normalized, then split by each pre-tokenizer in turn, mapped to GPT-2's
// byte alphabet and merged by rank. Decoding maps tokens back to bytes and
// replaces invalid UTF-8 the way Rust's String::from_utf8_lossy does.
//
// DeepSeek's Split patterns use a lookahead (`\s+(?!\S)`) that Go's regexp
// package cannot compile. Rather than a regex engine, the package recognises
// the patterns DeepSeek (and GPT-2's ByteLevel) use by their exact text and
// runs a hand-written scanner for each; any other pattern is compiled with
// Go's regexp after rewriting the escapes whose meaning differs between
// Oniguruma (the engine tokenizers uses) and RE2, and a pattern that cannot
// be expressed that way is refused with an error naming it.
//
// Character classes come from Go's unicode tables (Unicode 15.0); a
// tokenizers build whose Oniguruma has other tables can classify characters
// assigned after that edition differently.
package tokenizer
