package main

import (
	"flag"

	"github.com/dsfs/dsfs/views"
)

// viewFlags are the options views declare (views.View.Options), offered
// by every command that builds views: declared once, in the view.
type viewFlags map[string]*string

func addViewFlags(fs *flag.FlagSet) viewFlags {
	f := make(viewFlags)
	for _, v := range views.All() {
		for _, o := range v.Options {
			f[o.Name] = fs.String(o.Name, o.Default, v.Name+"/: "+o.Usage)
		}
	}
	return f
}

// apply sets the views' options in opt.
func (f viewFlags) apply(opt *views.Options) {
	if len(f) == 0 {
		return
	}
	opt.Values = make(map[string]string, len(f))
	for name, v := range f {
		opt.Values[name] = *v
	}
}
