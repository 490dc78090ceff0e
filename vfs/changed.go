package vfs

import (
	"errors"

	"github.com/dsfs/dsfs/sourcefile"
)

// sourceChangeReported reports whether err is the change of a source file
// that an earlier failed read has logged already: a file changed under the
// mount fails every later read, in every view, and is logged once.
func sourceChangeReported(err error) bool {
	var ce *sourcefile.ChangedError
	return errors.As(err, &ce) && !ce.File.FirstReport()
}
