package vfs

import (
	"errors"

	"github.com/dsfs/dsfs/sourcefile"
)

// logSourceError reports whether a failed open or read should be logged:
// always, unless it is the change of a source file that was logged
// already. A file changed under the mount fails every later open and read,
// in every view, and is logged once.
func logSourceError(err error) bool {
	var ce *sourcefile.ChangedError
	return !errors.As(err, &ce) || ce.File.FirstReport()
}
