// Package views turns a checkpoint catalog into trees of virtual files
// (package vfile), one directory per view: source/, nvfp4/, engram-fp4/,
// nvfp4+engram-fp4/, trace/, q2/, gguf/ and manifest/. It assembles files
// and computes no bytes: what a derived byte is, an engine says (packages
// nvfp4, engramfp4, q2, gguf, trace, inventory), and views puts the
// engines' tensors, blocks and documents in trees. A view never touches
// FUSE; the mount and `dsfs export` read what it builds through the same
// vfile.Reader.
//
// # Views and the registry
//
// A View is a name, a line of help, the options it declares and a builder.
// The registry lists every view in order (registry.go). Build builds the
// views Options names, concurrently, and keeps them in registry order, so
// that the tree, the stats, the warnings and the error reported are those
// of building them one after another.
//
// # Builders and the set
//
// A builder gets the Set, the views of one catalog: the catalog (Set.Cat),
// the options (Set.Opt; Set.option reads the view's declared ones) and what
// the views of a mount share, the source files they opened and the
// rewriters. It returns a Built: the view's directory, its live counters
// for .dsfs/stats.json, the warnings to log once mounted, what it started
// (the set closes it) and the memory it computes with outside the block
// cache.
//
// # Files
//
// A file of a view is a source file served unchanged (Set.sourceFile), a
// virtual safetensors file laid out from an engine's tensors
// (Set.tensorFile, Set.layOut; package tensorfile), a document generated
// when first read (jsonDoc; vfile.Doc) or bytes made at mount (a patched
// config.json, an index); tree places them at slash-separated paths. A bad
// source shard stays visible in a derived view as a file whose reads fail
// (Set.badShard), so that a loader fails loudly instead of loading a
// checkpoint with tensors quietly missing.
//
// # Rewriters
//
// nvfp4/, engram-fp4/ and nvfp4+engram-fp4/ are one builder
// (safetensorsView) over a list of Rewriters, the engines' transcoders:
// the first rewriter that claims a tensor replaces it, and unclaimed
// tensors pass through; each rewriter patches config.json and adds its own
// files. A mount makes each rewriter once and keeps what it made of each
// shard, so views applying the same rewriter share its tensors and its
// memos (the NVFP4 global exponents).
//
// # Provenance
//
// Whoever lays out a safetensors file keeps the record of its tensors as
// their makers made them (tensorfile.Out: codec and sources).
// manifest/views/VIEW.json describes each view from those records alone
// (provenance.go), building a view the mount does not serve when its
// description is first read.
//
// # Adding a view
//
// A new view is one file, with its builder, its options and its stats,
// and one line in the registry; the package's example adds one.
package views
