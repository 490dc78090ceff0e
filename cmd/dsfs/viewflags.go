package main

import (
	"flag"
	"slices"
	"strconv"

	"github.com/dsfs/dsfs/views"
)

// viewFlags are the options views declare (views.View.Options), offered
// by every command that builds views (mount, export; trace those of
// trace/): declared once, in the view.
type viewFlags map[string]*flag.Flag

// addViewFlags adds the options of the views named only, or of every view
// when none is.
func addViewFlags(fs *flag.FlagSet, only ...string) viewFlags {
	f := make(viewFlags)
	for _, v := range views.All() {
		if len(only) > 0 && !slices.Contains(only, v.Name) {
			continue
		}
		for _, o := range v.Options {
			switch o.Kind {
			case views.IntOption:
				n, err := strconv.Atoi(o.Default)
				if err != nil {
					panic("view " + v.Name + ": option " + o.Name + ": default is not an integer")
				}
				fs.Int(o.Name, n, o.Usage)
			case views.BoolOption:
				fs.Bool(o.Name, o.Default == "true", o.Usage)
			case views.StringOption:
				fs.String(o.Name, o.Default, o.Usage)
			default:
				panic("view " + v.Name + ": option " + o.Name + ": unknown kind")
			}
			f[o.Name] = fs.Lookup(o.Name)
		}
	}
	return f
}

// apply sets the views' options in opt.
func (f viewFlags) apply(opt *views.Options) {
	opt.Values = make(map[string]string, len(f))
	for name, fl := range f {
		opt.Values[name] = fl.Value.String()
	}
}
