// Package vfile is the model of a dsfs virtual file: what a view builds and
// what the mount and `dsfs export` read through. It knows nothing of FUSE,
// of safetensors or of any transform.
//
// # Files as segments
//
// A [File] has a size known when it is built and is a run of [Segment]s:
// [Bytes] (a header, a patched config.json), a [Range] of a source file
// served unchanged, [Unreadable] bytes standing for a bad source,
// [*Blocks] — derived data of known length computed in blocks by a pure
// function of source bytes — and [Small], derived bytes (a scalar, a
// computed header) cheap enough to compute on every read. Because every size is known up front, `ls -l`
// is exact at mount, files are page-cacheable and mmap works. A Range
// appended right after the Range it continues, in the same source, extends
// it, so a run of small tensors laid out as in their source is one source
// read.
//
// # Blocks computed once
//
// A [Reader] serves one open file handle. Literal and source segments are
// copied; a block of a Blocks segment is asked of a [Cache] by its key
// (Blocks.ID, block index). The cache computes each block at most once
// however many readers want it, and keeps it under a byte budget; the ID
// names the transform, so two views sharing a transform share blocks. A
// Reader that sees a sequential reader (or a read from offset 0) asks the
// cache to compute the next [ReadAheadBytes] ahead of it; once the reader
// has read that much in one run, also the next [StreamAheadBytes] of
// derived bytes, however far past verbatim bytes they lie.
//
// A read's pieces hold the cached blocks they answer from (leases) until
// [Release]: the mount releases them once the kernel has copied its reply.
// A [PageCacheOpener]'s Reader also tells the cache which blocks a
// sequential run had whole, since the kernel's page cache answers what
// comes after: their memory is the first the cache computes new blocks
// into.
//
// # Documents
//
// A [Doc] is a generated document (JSON or Markdown) whose size is not
// known until it has been generated. It is generated whole on first read
// and kept; a failed or interrupted generation is not kept, so the next
// read tries again. A header document follows from the headers and is
// generated to answer a stat. A streamed document is a large header
// document: a stat measures it by writing it to a counter ([WriteJSON]
// streams a value's JSON without holding its text), only its size is
// kept, and each open writes it afresh. A live document is generated
// afresh on every read.
//
// # Cancellation
//
// Blocks and documents share one rule: a computation runs once, every
// reader waiting for it may give up on its own (its FUSE request was
// interrupted, its context ended), and the computation is cancelled only
// when no reader waits for it any more. So a second `cat` of a document
// being generated can be interrupted, and an interrupted first reader does
// not throw away work that others wait for.
//
// # Caching by the kernel
//
// File content never changes while mounted, so the mount lets the kernel
// keep its pages (FOPEN_KEEP_CACHE) and second reads never reach the
// Reader. Documents are served with direct I/O, since their size is only
// known once generated. A [Node] tree of directories, Files and Docs is
// what a view builds; an [Opener] is how the mount turns a File into a
// Reader.
package vfile
