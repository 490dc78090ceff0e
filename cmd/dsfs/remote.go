package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/dsfs/dsfs/checkpoint"
	"github.com/dsfs/dsfs/objstore"
	"github.com/dsfs/dsfs/sourcefile"
)

// openCatalog catalogs the checkpoint src names: a local directory, or
// s3://BUCKET/PREFIX, whose objects are read through a chunk cache in
// chunkDir capped at chunkBytes (0: objstore's default). The bucket, when
// there is one, must be closed after the catalog.
func openCatalog(src, chunkDir string, chunkBytes int64) (*checkpoint.Catalog, *objstore.Bucket, error) {
	if !objstore.IsURL(src) {
		cat, err := checkpoint.Open(src)
		return cat, nil, err
	}
	if chunkDir == "" {
		d, err := defaultChunkDir()
		if err != nil {
			return nil, nil, err
		}
		chunkDir = d
	}
	b, err := objstore.Open(context.Background(), src, objstore.Options{CacheDir: chunkDir, CacheBytes: chunkBytes})
	if err != nil {
		return nil, nil, err
	}
	cat, err := checkpoint.OpenStore(context.Background(), bucketStore{b})
	if err != nil {
		b.Close()
		return nil, nil, err
	}
	return cat, b, nil
}

// chunkDirIn is where the chunks of a bucket's objects are kept in a
// --cache-dir: beside its entries, in a folder the disk cache's scan
// leaves alone.
func chunkDirIn(cacheDir string) string { return filepath.Join(cacheDir, "objects") }

// defaultChunkDir is the chunk cache of a mount from a bucket without
// --cache-dir: the user's cache directory ($XDG_CACHE_HOME or ~/.cache).
func defaultChunkDir() (string, error) {
	d, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("no directory for the object chunk cache (%v); name one with --cache-dir", err)
	}
	return filepath.Join(d, "dsfs", "objects"), nil
}

// bucketStore is a bucket as the catalog opens it.
type bucketStore struct{ *objstore.Bucket }

func (s bucketStore) Open(ctx context.Context, name string) (sourcefile.Object, error) {
	o, err := s.Bucket.Open(ctx, name)
	if err != nil {
		return nil, err // not a nil *Object in an interface
	}
	return o, nil
}

// sourceArg is the source argument of a command as the catalog takes it:
// a bucket URL as written, a directory made absolute.
func sourceArg(arg string) (string, error) {
	if objstore.IsURL(arg) {
		return arg, nil
	}
	return filepath.Abs(arg)
}
