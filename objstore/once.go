package objstore

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"net/http"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// ReadOnceAt reads like ReadAt, for bytes its caller reads once and keeps
// (a safetensors header, config.json at mount): chunks the cache holds
// are served from it, and otherwise the bytes are fetched with one range
// GET of exactly them, which is not cached and does not move the
// read-ahead. So opening a checkpoint of many shards costs each shard its
// header's few hundred kilobytes, not a chunk.
func (o *Object) ReadOnceAt(p []byte, off int64) (int, error) {
	if o.closed.Load() || o.b.ctx.Err() != nil {
		return 0, fmt.Errorf("%s: %w", o.url, fs.ErrClosed)
	}
	if off < 0 {
		return 0, fmt.Errorf("%s: read at negative offset %d", o.url, off)
	}
	if ce := o.changed.Load(); ce != nil {
		return 0, ce
	}
	if off >= o.size {
		return 0, io.EOF
	}
	end := min(off+int64(len(p)), o.size)
	cached := true
	for ci := off / ChunkSize; ci <= (end-1)/ChunkSize && cached; ci++ {
		cached = o.b.cache.has(o.chunkName(ci))
	}
	var err error
	if cached {
		for pos := off; pos < end && err == nil; {
			ci := pos / ChunkSize
			m := min(end, (ci+1)*ChunkSize) - pos
			err = o.readChunk(ci, pos-ci*ChunkSize, p[pos-off:pos-off+m])
			pos += m
		}
	} else {
		var data []byte
		if data, err = o.getRange(off, end-off); err == nil {
			copy(p, data)
			o.b.stats.miss.Add(end - off)
		}
	}
	if err != nil {
		return 0, err
	}
	if end-off < int64(len(p)) {
		return int(end - off), io.EOF
	}
	return len(p), nil
}

// getRange fetches n bytes at start of the pinned version with a range
// GET.
func (o *Object) getRange(start, n int64) ([]byte, error) {
	b := o.b
	rng := fmt.Sprintf("bytes=%d-%d", start, start+n-1)
	what := "GET " + o.url + " " + rng
	var data []byte
	err := b.retry(b.ctx, what, func(ctx context.Context) error {
		b.stats.gets.Add(1)
		ctx, cancel := context.WithTimeout(ctx, getTimeout)
		defer cancel()
		out, err := b.client.GetObject(ctx, &s3.GetObjectInput{
			Bucket: &b.bucket, Key: &o.key, Range: &rng, IfMatch: &o.etag,
		})
		if err != nil {
			if s := statusOf(err); s == http.StatusPreconditionFailed || s == http.StatusNotFound {
				return o.markChanged(ctx)
			}
			return err
		}
		defer out.Body.Close()
		// Servers that ignore If-Match still say which version they send.
		if got := aws.ToString(out.ETag); got != o.etag {
			return o.setChanged(got)
		}
		if l := aws.ToInt64(out.ContentLength); l != n {
			return fmt.Errorf("answer of %d bytes, want %d", l, n)
		}
		buf := make([]byte, n)
		if _, err := io.ReadFull(out.Body, buf); err != nil {
			return err
		}
		b.stats.bytesFetched.Add(n)
		data = buf
		return nil
	})
	if err != nil {
		return nil, wrap(what, err)
	}
	return data, nil
}
