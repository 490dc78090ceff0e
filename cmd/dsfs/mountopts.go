package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/dsfs/dsfs/objstore"
)

// fuseOptions are the -o options of dsfs mount, as users of FUSE file
// systems and mount(8) type them; each -o may hold a comma-separated list.
type fuseOptions []string

func (o *fuseOptions) String() string { return strings.Join(*o, ",") }

func (o *fuseOptions) Set(s string) error {
	for _, opt := range strings.Split(s, ",") {
		if opt != "" {
			*o = append(*o, opt)
		}
	}
	return nil
}

// mountFlagOptions are passed on to the kernel as mount flags.
var mountFlagOptions = []string{"suid", "nosuid", "dev", "nodev", "exec", "noexec"}

// ignoredOptions concern mount(8), fstab or access times and mean nothing
// to a read-only dsfs mount; mount helpers pass some of them on.
var ignoredOptions = []string{
	"defaults", "auto", "noauto", "user", "nouser", "users", "owner", "group", "_netdev", "nofail",
	"atime", "noatime", "relatime", "norelatime", "strictatime", "diratime", "nodiratime", "lazytime",
}

// apply sets the flags of fs that the options name and returns the mount
// flags among them. ro and default_permissions are always in force; rw is
// refused; an option that is neither a FUSE option nor a flag of fs
// (cache_mb=N stands for --cache-mb N; a list value separates its items
// with ':' since ',' separates options) is named in the error, all of them
// in one line.
func (o fuseOptions) apply(fs *flag.FlagSet) ([]string, error) {
	var flags, unknown []string
	for _, opt := range o {
		name, val, hasVal := strings.Cut(opt, "=")
		switch {
		case name == "ro" || name == "default_permissions":
		case name == "rw":
			return nil, errors.New("-o rw: dsfs is read-only")
		case name == "allow_other":
			fs.Set("allow-other", "true")
		case slices.Contains(mountFlagOptions, name):
			flags = append(flags, name)
		case slices.Contains(ignoredOptions, name) || strings.HasPrefix(name, "x-") || name == "comment":
		default:
			f := fs.Lookup(strings.ReplaceAll(name, "_", "-"))
			if f == nil || len(f.Name) == 1 || f.Name == "background" {
				unknown = append(unknown, opt)
				continue
			}
			if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() && !hasVal {
				val = "true"
			} else if !hasVal {
				return nil, fmt.Errorf("-o %s needs a value (%s=...)", name, name)
			}
			if f.Name == "views" {
				val = strings.ReplaceAll(val, ":", ",")
			}
			if err := fs.Set(f.Name, val); err != nil {
				return nil, fmt.Errorf("-o %s: %v", opt, err)
			}
		}
	}
	if len(unknown) > 0 {
		return nil, fmt.Errorf("unknown -o option %s (dsfs takes ro, allow_other, default_permissions, nonempty, nosuid, nodev, noexec, and its flags as name=value, e.g. cache_mb=2048)", strings.Join(unknown, ", "))
	}
	return flags, nil
}

// mountHelperArgs returns the arguments of a dsfs mount command when dsfs
// runs as a mount helper: mount(8) runs /sbin/mount.fuse.dsfs (a link to
// dsfs) as `mount.fuse.dsfs SRC MNT -o OPTS`, and mount.fuse3, given the
// type fuse.dsfs, runs `dsfs SRC MNT -o OPTS`. A helper must return once
// the file system is mounted, so the mount goes to the background unless
// -f asks for the foreground. mount(8)'s helper flags -n, -s and -v are
// dropped.
func mountHelperArgs(argv []string) ([]string, bool) {
	if len(argv) < 3 {
		return nil, false
	}
	args := argv[1:]
	if !strings.HasPrefix(filepath.Base(argv[0]), "mount.") {
		if slices.ContainsFunc(commands, func(c command) bool { return c.name == args[0] }) {
			return nil, false
		}
		if fi, err := os.Stat(args[0]); !objstore.IsURL(args[0]) && (err != nil || !fi.IsDir()) {
			return nil, false
		}
	}
	var out []string
	background := true
	for _, a := range args {
		switch a {
		case "-f":
			background = false
		case "-n", "-s", "-v": // mount(8)'s no-mtab, sloppy and verbose: nothing to do here
		default:
			out = append(out, a)
		}
	}
	if background {
		out = append(out, "--background")
	}
	return out, true
}
