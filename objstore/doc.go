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
// cached share one GET, whose body goes straight to the chunk file; they
// then read the file. A chunk that cannot be cached (a full disk) is
// read by a GET of the reader's own, into memory.
//
// # Prefetch
//
// Each Object watches its reads. A read that starts where the last one
// ended, or in the chunk after it, is sequential: it sets a read-ahead
// window of one chunk, doubled at every later sequential read that moves
// into a new chunk, up to MaxWindow (or a quarter of CacheBytes, if less),
// and the chunks of the window that are not cached are fetched in the
// background, at most Options.Prefetches GETs at once per Bucket. A read
// elsewhere resets the window. Readers never wait for a prefetch unless it
// fetches the chunk they need; their own GETs do not queue behind
// prefetches.
//
// # Retries and cancellation
//
// The SDK's retryer is off; objstore retries each request itself, so the
// retries are bounded and counted in Stats: Attempts tries, sleeping
// 100 ms, then doubling, between them, after which the error names the
// object and the last reason. Answers that retrying cannot change (403,
// 404, 412 and other client errors) are not retried. Every request runs
// under a context that Bucket.Close cancels, and Close waits for the
// background fetches to end.
package objstore
