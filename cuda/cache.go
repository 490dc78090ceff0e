package cuda

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
)

// cacheMagic starts every cache entry; the SHA-256 of the image follows.
const cacheMagic = "dsfs-cuda-image 1\n"

// kernelCache keeps compiled kernel images in a directory, one file per
// key. Each entry carries the SHA-256 of its image, so that a damaged or
// truncated entry reads as missing and gets recompiled.
type kernelCache struct {
	dir string // "" disables the cache
}

// defaultCacheDir is os.UserCacheDir()/dsfs/cuda.
func defaultCacheDir() (string, error) {
	d, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(d, "dsfs", "cuda"), nil
}

// cacheKey names the image of src compiled with opts by NVRTC version
// nvrtcVersion.
func cacheKey(src string, opts []string, nvrtcVersion string) string {
	h := sha256.New()
	h.Write([]byte(src))
	for _, o := range opts {
		h.Write([]byte{0})
		h.Write([]byte(o))
	}
	h.Write([]byte{0})
	h.Write([]byte("nvrtc " + nvrtcVersion))
	return hex.EncodeToString(h.Sum(nil))
}

func (c kernelCache) path(key string) string { return filepath.Join(c.dir, key+".bin") }

// get returns the image stored under key; ok is false when there is none
// or the entry does not check out.
func (c kernelCache) get(key string) (image []byte, ok bool) {
	if c.dir == "" {
		return nil, false
	}
	b, err := os.ReadFile(c.path(key))
	if err != nil || len(b) < len(cacheMagic)+sha256.Size || string(b[:len(cacheMagic)]) != cacheMagic {
		return nil, false
	}
	sum, image := b[len(cacheMagic):len(cacheMagic)+sha256.Size], b[len(cacheMagic)+sha256.Size:]
	if got := sha256.Sum256(image); !bytes.Equal(got[:], sum) || len(image) == 0 {
		return nil, false
	}
	return image, true
}

// put stores image under key, replacing any entry atomically so that a
// concurrent reader sees the old entry or the new one, never a mix.
func (c kernelCache) put(key string, image []byte) error {
	if c.dir == "" {
		return nil
	}
	if err := os.MkdirAll(c.dir, 0o755); err != nil {
		return fmt.Errorf("kernel cache: %w", err)
	}
	f, err := os.CreateTemp(c.dir, key+".tmp*")
	if err != nil {
		return fmt.Errorf("kernel cache: %w", err)
	}
	sum := sha256.Sum256(image)
	_, err = f.Write(append(append([]byte(cacheMagic), sum[:]...), image...))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), c.path(key))
	}
	if err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("kernel cache: %w", err)
	}
	return nil
}
