package views

import (
	"fmt"
	"strconv"

	"github.com/dsfs/dsfs/diskcache"
	"github.com/dsfs/dsfs/trace/backend"
	"github.com/dsfs/dsfs/vfile"
)

// Option is a setting a view declares.
type Option struct {
	Name    string // the flag's name, unique among all views' options
	Usage   string // names the view, as --help shows it among all flags
	Default string
	Kind    OptionKind
	// Check, when set, validates a given value, so that the CLI refuses a
	// bad one before it opens anything. Callers other than the CLI set
	// Options.Values directly, so a builder still checks what it relies on.
	Check func(string) error
	// File says the value names a file the view reads: what an export
	// holds then depends on the file's content, not on its name.
	File bool
}

// OptionKind is the type of an option's value, which the CLI's flag
// parses and --help shows.
type OptionKind int

const (
	StringOption OptionKind = iota // any text
	IntOption                      // a decimal integer
	BoolOption                     // "true" or "false"; the flag alone means true
)

// Options are what views are built with beyond the catalog: the caches
// and backends the caller owns, the settings every view shares and the
// values of the options views declare (View.Options).
type Options struct {
	// Views names the views to build; empty means all.
	Views []string
	// Revision is the source revision the q2/ documents record; empty
	// means the Hugging Face cache snapshot name when the source is one.
	// Not an option of q2/: the CLI's --revision also picks which
	// snapshot of a Hugging Face cache folder every view serves.
	Revision string
	// DiskCache, when set, keeps the blocks of expensive views (q2/) and
	// manifest/'s digests across mounts; the in-memory block cache stays
	// in front of it. The CLI opens it (--cache-dir), since verify, audit,
	// inspect and diff share it without building views.
	DiskCache *diskcache.Cache
	// Cache, when set, is the block cache files are read through; documents
	// that need a file's derived bytes (q2/'s shard digests) read them
	// from it too, so a block read by both is computed once.
	Cache vfile.Cache
	// GPU starts the GPU backend views that compute on one (trace/) use
	// for --device cuda or auto (see backend.Start); nil: the program has
	// none (the CLI passes CUDA's, which loads at run time).
	GPU backend.GPU
	// Working, when set, is told the working memory of the views that
	// have started computing (WorkingMemory) each time a view starts: a
	// mount raises its memory limit to hold it.
	Working func(total int64)
	// Values are the views' declared options (View.Options) by name; an
	// option not given takes its default.
	Values map[string]string
}

// option returns the value of option name that view declares: the one
// given in Opt.Values, else its default.
func (s *Set) option(view, name string) string {
	if v, ok := s.Opt.Values[name]; ok {
		return v
	}
	for _, v := range s.registry {
		if v.Name != view {
			continue
		}
		for _, o := range v.Options {
			if o.Name == name {
				return o.Default
			}
		}
	}
	panic(fmt.Sprintf("views: view %s reads option %s, which it does not declare", view, name))
}

// intOption returns option name of view as an integer.
func (s *Set) intOption(view, name string) (int, error) {
	v := s.option(view, name)
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, fmt.Errorf("--%s %s: not an integer", name, v)
	}
	return n, nil
}

// boolOption returns option name of view as a boolean.
func (s *Set) boolOption(view, name string) (bool, error) {
	v := s.option(view, name)
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, fmt.Errorf("--%s %s: not true or false", name, v)
	}
	return b, nil
}
