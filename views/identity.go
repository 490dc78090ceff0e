package views

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"slices"

	"github.com/dsfs/dsfs/checkpoint"
	"github.com/dsfs/dsfs/codecs"
)

// Identity names what the files of view hold, built by program (its
// version and revision) with opt from cat: the view, the code that
// computes it, the settings it reads (a setting naming a file by the
// file's content) and every source file by its stamp (device, inode,
// size, modification and status-change times: sourcefile.Stamp). Files
// written from a view and trusted later (an export's, a mount's kept
// files) are trusted only under the same identity, so a changed source
// (even one whose mtime was put back), another setting or a new dsfs
// writes them again. A source file changed within sourcefile.RacyWindow
// before its stamp was taken cannot prove its bytes by its stamp: the
// identity then holds a random part, so that nothing later trusts what is
// written under it.
func Identity(program, view string, opt Options, cat *checkpoint.Catalog) (string, error) {
	of, err := identities(program, opt, cat)
	if err != nil {
		return "", err
	}
	return of(view), nil
}

// identities returns Identity for each view of one set: it reads the
// option files and stats the source files once, whatever the views.
func identities(program string, opt Options, cat *checkpoint.Catalog) (func(view string) string, error) {
	var rest bytes.Buffer // what follows the view's name
	fmt.Fprintf(&rest, "revision %q\n", opt.Revision)
	for _, name := range slices.Sorted(maps.Keys(opt.Values)) {
		v := opt.Values[name]
		if o, _ := OptionNamed(name); o.File && v != "" {
			b, err := os.ReadFile(v)
			if err != nil {
				return nil, err
			}
			fmt.Fprintf(&rest, "option %s: file sha256 %x\n", name, sha256.Sum256(b))
			continue
		}
		fmt.Fprintf(&rest, "option %s %q\n", name, v)
	}
	racy := false
	for _, sh := range cat.Shards {
		st, taken := sh.Stamp()
		fmt.Fprintf(&rest, "shard %q %+v\n", sh.Name, st)
		racy = racy || !st.Proven(taken)
	}
	for _, f := range cat.Files {
		sf, err := cat.OpenFile(f.Path)
		if err != nil {
			return nil, err
		}
		st, taken := sf.Stamp()
		sf.Close()
		fmt.Fprintf(&rest, "file %q %+v\n", f.Name, st)
		racy = racy || !st.Proven(taken)
	}
	return func(view string) string {
		h := sha256.New()
		fmt.Fprintf(h, "dsfs view\n%s\ncodec %s\nview %s\n", program, codecs.Version, view)
		h.Write(rest.Bytes())
		if racy {
			fmt.Fprintf(h, "racy %x\n", rand.Uint64())
		}
		return hex.EncodeToString(h.Sum(nil))
	}, nil
}

// OptionNamed returns the option of that name some view declares.
func OptionNamed(name string) (Option, bool) {
	for _, v := range registry {
		for _, o := range v.Options {
			if o.Name == name {
				return o, true
			}
		}
	}
	return Option{}, false
}
