package objstore

import (
	"fmt"
	"strings"
)

// IsURL reports whether s names objects in a bucket: s3://BUCKET[/PREFIX].
func IsURL(s string) bool {
	return strings.HasPrefix(s, "s3://")
}

// parseURL splits s3://BUCKET[/PREFIX] into the bucket and the key prefix,
// which is empty or ends with a slash so that it only matches whole path
// components.
func parseURL(url string) (bucket, prefix string, err error) {
	rest, ok := strings.CutPrefix(url, "s3://")
	if !ok {
		return "", "", fmt.Errorf("%q is not an s3:// URL", url)
	}
	bucket, prefix, _ = strings.Cut(rest, "/")
	if bucket == "" {
		return "", "", fmt.Errorf("%q names no bucket", url)
	}
	prefix = strings.Trim(prefix, "/")
	if prefix != "" {
		prefix += "/"
	}
	return bucket, prefix, nil
}
