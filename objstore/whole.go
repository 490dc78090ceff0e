package objstore

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"net/http"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// Get, Put and Delete treat objects as whole values, each request retried
// as reads are: what a cache of computed blocks kept in a bucket needs
// (diskcache.Remote). They bypass the chunk cache and pin no version; the
// caller checks what it gets.

// Get returns the bytes of the object name (relative to the prefix), at
// most limit+1 of them: a longer object is cut there, so that a caller that
// knows how long the object should be never reads a foreign one whole. A
// missing object gives an error wrapping fs.ErrNotExist.
func (b *Bucket) Get(ctx context.Context, name string, limit int64) ([]byte, error) {
	key := b.prefix + name
	ctx, cancel := b.scope(ctx)
	defer cancel()
	rng := fmt.Sprintf("bytes=0-%d", limit)
	what := "GET " + b.url(key)
	var data []byte
	err := b.retry(ctx, what, func(ctx context.Context) error {
		b.stats.gets.Add(1)
		// A block document may be large: paced, not one timeout, so a
		// slow link can still bring it whole.
		ctx, pace, stop := b.paced(ctx)
		defer stop()
		out, err := b.client.GetObject(ctx, &s3.GetObjectInput{Bucket: &b.bucket, Key: &key, Range: &rng})
		if err != nil {
			return err
		}
		defer out.Body.Close()
		body := io.LimitReader(pace(out.Body), limit+1)
		var buf []byte
		if n := aws.ToInt64(out.ContentLength); n >= 0 && out.ContentLength != nil {
			// The answer's length sizes the buffer once; ReadAll's
			// doubling would copy a large object several times.
			buf = make([]byte, min(n, limit+1))
			if _, err := io.ReadFull(body, buf); err != nil {
				return err // cut short: retried
			}
		} else if buf, err = io.ReadAll(body); err != nil {
			return err
		}
		b.stats.bytesFetched.Add(int64(len(buf)))
		data = buf
		return nil
	})
	if err != nil {
		if statusOf(err) == http.StatusNotFound {
			return nil, fmt.Errorf("%s: %w", b.url(key), fs.ErrNotExist)
		}
		if statusOf(err) == http.StatusRequestedRangeNotSatisfiable { // an empty object
			return []byte{}, nil
		}
		return nil, wrap(what, err)
	}
	return data, nil
}

// Put writes p as the object name, replacing any object there.
func (b *Bucket) Put(ctx context.Context, name string, p []byte) error {
	key := b.prefix + name
	ctx, cancel := b.scope(ctx)
	defer cancel()
	what := "PUT " + b.url(key)
	err := b.retry(ctx, what, func(ctx context.Context) error {
		_, err := b.client.PutObject(ctx, &s3.PutObjectInput{
			Bucket: &b.bucket, Key: &key, Body: bytes.NewReader(p), ContentLength: aws.Int64(int64(len(p))),
		})
		return err
	})
	if err != nil {
		return wrap(what, err)
	}
	b.stats.bytesPut.Add(int64(len(p)))
	return nil
}

// Delete removes the object name; removing a missing object is not an
// error, as S3 has it.
func (b *Bucket) Delete(ctx context.Context, name string) error {
	key := b.prefix + name
	ctx, cancel := b.scope(ctx)
	defer cancel()
	what := "DELETE " + b.url(key)
	err := b.retry(ctx, what, func(ctx context.Context) error {
		_, err := b.client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &b.bucket, Key: &key})
		return err
	})
	if err != nil && statusOf(err) != http.StatusNotFound {
		return wrap(what, err)
	}
	return nil
}
