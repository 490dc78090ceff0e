// Package inventory takes stock of every tensor of a checkpoint: where its
// bytes are, their sha256, and checks of its values in the domain of its
// format (non-finite floats, NaN scales, FP4 code histograms, the range and
// exactness of decoded quantised weights), plus the tensor-parallel cuts a
// serving engine would make. It is what the seed script inventory.py did
// for the draft tensors, done for every tensor, on every core, in one pass
// over the bytes: each buffer read is hashed and checked before the next.
//
// Records follow the seed's field names (name, file, dtype, shape,
// byte_range, nbytes, nbytes_ok, sha256, role, official, scale, values; the
// seed's tp2 is tp), and Summarize computes the seed's summary. Where this
// package departs from the seed it says so at the field.
//
// An Inventory computes records shard by shard on first use and keeps them,
// and Manifest reports them (manifest/'s manifest.json and shards/NAME.json);
// a Cache keeps them on disk across runs, keyed by each shard's path, size
// and modification time, and Progress counts the bytes hashed so a status
// file or a progress bar can show how far it got.
package inventory
