// Package objstore reads the objects of an S3-compatible bucket as files
// that do not change under their reader.
//
// # Pinning
//
// Bucket.Open sends a HEAD and pins the object's ETag, size and
// modification time. Every read asks for that version only: range GETs
// carry If-Match with the pinned ETag, and the ETag of each response is
// compared with it too, so a server that ignores If-Match still cannot
// hand over bytes of another version. A 412 or 404 means the object was
// replaced or deleted: the read fails with a *ChangedError, which wraps
// sourcefile.ErrChanged, and so does every later read of that Object, as
// with a local file that changed under sourcefile.
//
// # Chunk cache
//
// Objects are read in fixed chunks of ChunkSize bytes (the last one
// shorter), each kept in its own file under Options.CacheDir, named by the
// SHA-256 of bucket, key, ETag and chunk index, so a cached chunk belongs
// to exactly one version and a new version never finds an old one's bytes.
// Files are written to a temporary name and renamed, and carry a CRC-32C
// per 64 KiB block in a header that each read checks for the blocks it
// serves: a damaged file is deleted and its chunk fetched again, never
// served. The files' total size is bounded by Options.CacheBytes, the
// least recently used being deleted first; Open scans the directory to
// learn what an earlier run left there. Readers of a chunk that is not
// cached share one fetch of it, whose body goes straight to the chunk
// file; they then read the file. A chunk that cannot be cached (a full
// disk) is read by a GET of the reader's own, into memory.
//
// # Prefetch
//
// Each Object follows up to four sequential readers, streams, at once (a
// view file's reader and a codec reading scales farther on in the same
// object are two). A read that starts where a stream ended, in the chunk
// it ended in, or in the next one, continues that stream; any other read
// starts one, in place of the one read least recently. A stream's second
// read sets its read-ahead window to one chunk, doubled at every later
// read that moves into a new chunk, up to MaxWindow (or a sixteenth of
// CacheBytes, if less, so that four streams together ask for a quarter).
// The chunks of the window that are not cached are fetched in the
// background, in runs of up to RunChunks chunks, one range GET each whose
// body is cut into the chunks' files as it arrives; once the window is
// that wide, a run is fetched only when the window has room for a whole
// one, so a reader in its stride costs one GET per RunChunks chunks. At most
// Options.Prefetches such GETs run at once per Bucket. Readers never wait
// for a prefetch unless it fetches the chunk they need, and then only
// until that chunk is in; their own GETs do not queue behind prefetches.
//
// # Retries and cancellation
//
// The SDK's retryer is off; objstore retries each request itself, so the
// retries are bounded and counted in Stats: Attempts tries, sleeping
// 100 ms, then doubling, between them, after which the error names the
// object and the last reason. Answers that retrying cannot change (403,
// 404, 412 and other client errors) are not retried. A GET whose answer,
// or the next chunk of whose body, takes over a minute is cancelled and
// tried again; a retried run keeps the chunks it had already cached.
// Every request runs
// under a context that Bucket.Close cancels, and Close waits for the
// background fetches to end.
package objstore
