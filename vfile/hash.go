package vfile

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
)

// SHA256 returns the hex SHA-256 of bytes [off, off+n) of r, as documents
// record the digests of tensors and files. It reads at most 4 MiB at a
// time and checks ctx between reads. A source that ends early (io.EOF) is
// hashed as far as it goes, so a caller comparing digests sees a mismatch;
// any other read error is returned.
func SHA256(ctx context.Context, r io.ReaderAt, off, n int64) (string, error) {
	h := sha256.New()
	buf := make([]byte, min(n, 4<<20))
	for pos := int64(0); pos < n; {
		if err := ctx.Err(); err != nil {
			return "", err
		}
		p := buf[:min(int64(len(buf)), n-pos)]
		m, err := r.ReadAt(p, off+pos)
		h.Write(p[:m])
		pos += int64(m)
		if err == io.EOF {
			break
		}
		if err != nil {
			return "", err
		}
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
