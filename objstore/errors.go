package objstore

import (
	"errors"
	"net/http"

	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"

	"github.com/dsfs/dsfs/sourcefile"
)

// ChangedError is the error of every read of an object that was replaced
// or deleted since it was opened.
type ChangedError struct {
	URL string // s3://bucket/key
	Was string // the pinned ETag
	Now string // the ETag now, or "" when the object is gone
}

// Error names the object and both ETags, e.g. `s3://b/k: source object
// changed since it was opened: ETag "x", now "y"` (or `, gone`).
func (e *ChangedError) Error() string {
	now := "gone"
	if e.Now != "" {
		now = "now " + e.Now
	}
	return e.URL + ": source object changed since it was opened: ETag " + e.Was + ", " + now
}

// Unwrap makes errors.Is(err, sourcefile.ErrChanged) hold.
func (e *ChangedError) Unwrap() error { return sourcefile.ErrChanged }

// statusOf returns the HTTP status of a failed request, or 0 when the
// request got no answer.
func statusOf(err error) int {
	var re *awshttp.ResponseError
	if errors.As(err, &re) {
		return re.HTTPStatusCode()
	}
	return 0
}

// permanent reports whether retrying cannot help: the server answered
// with a client error other than a timeout or throttling, or the object
// changed.
func permanent(err error) bool {
	var ce *ChangedError
	if errors.As(err, &ce) || errors.Is(err, errNotCached) {
		return true
	}
	switch s := statusOf(err); {
	case s == http.StatusRequestTimeout, s == http.StatusTooManyRequests:
		return false
	case s >= 400 && s < 500:
		return true
	}
	return false
}
