package main

import (
	"flag"
	"slices"
	"strings"
	"testing"
)

func TestFuseOptions(t *testing.T) {
	tests := []struct {
		opts      []string
		flags     []string // mount flags returned
		set, err  string   // flag values after, as name=value; error wanted
		cacheMB   int
		allowOthr bool
	}{
		{opts: []string{"allow_other,ro,default_permissions"}, allowOthr: true, cacheMB: 1024},
		{opts: []string{"ro,nosuid,nodev,noexec,noatime,_netdev,nofail,x-systemd.automount", "cache_mb=64"}, flags: []string{"nosuid", "nodev", "noexec"}, cacheMB: 64},
		{opts: []string{"views=source:nvfp4,no_hash"}, set: "views=source,nvfp4 no-hash=true", cacheMB: 1024},
		{opts: []string{"cache-mb=8"}, cacheMB: 8},
		{opts: []string{"ro,nonempty,log_file=/var/log/dsfs.log,pid_file=/run/dsfs.pid"}, set: "nonempty=true log-file=/var/log/dsfs.log pid-file=/run/dsfs.pid", cacheMB: 1024},
		{opts: []string{"rw"}, err: "-o rw: dsfs is read-only"},
		{opts: []string{"ro,frob,o=1,background,speed=2"}, err: "unknown -o option frob, o=1, background, speed=2 ("},
		{opts: []string{"views"}, err: "-o views needs a value"},
		{opts: []string{"cache_mb=x"}, err: `-o cache_mb=x: parse error`},
	}
	for _, tt := range tests {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		cacheMB := fs.Int("cache-mb", 1024, "")
		allowOther := fs.Bool("allow-other", false, "")
		fs.String("views", "", "")
		fs.Bool("no-hash", false, "")
		fs.Bool("background", false, "")
		fs.Bool("nonempty", false, "")
		fs.String("log-file", "", "")
		fs.String("pid-file", "", "")
		var o fuseOptions
		fs.Var(&o, "o", "")
		for _, s := range tt.opts {
			o.Set(s)
		}
		flags, err := o.apply(fs)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("%q: error %v, want %q", tt.opts, err, tt.err)
			}
			continue
		}
		if err != nil || !slices.Equal(flags, tt.flags) || *cacheMB != tt.cacheMB || *allowOther != tt.allowOthr {
			t.Errorf("%q: flags %q, cache-mb %d, allow-other %v, %v; want %q, %d, %v", tt.opts, flags, *cacheMB, *allowOther, err, tt.flags, tt.cacheMB, tt.allowOthr)
		}
		for _, kv := range strings.Fields(tt.set) {
			k, v, _ := strings.Cut(kv, "=")
			if got := fs.Lookup(k).Value.String(); got != v {
				t.Errorf("%q: --%s is %q, want %q", tt.opts, k, got, v)
			}
		}
	}
}

func TestMountHelperArgs(t *testing.T) {
	src := t.TempDir()
	tests := []struct {
		argv []string
		want string // "" when not a helper call
	}{
		{[]string{"dsfs", "mount", src, "/mnt"}, ""},
		{[]string{"dsfs", src, "/mnt", "-o", "ro,allow_other"}, src + " /mnt -o ro,allow_other --background"},
		{[]string{"dsfs", src, "/mnt", "-f", "-o", "ro"}, src + " /mnt -o ro"},
		{[]string{"/sbin/mount.fuse.dsfs", "/data/x", "/mnt", "-n", "-o", "ro"}, "/data/x /mnt -o ro --background"},
		{[]string{"dsfs", "/no/such/dir", "/mnt"}, ""},
		{[]string{"dsfs", "umount", "/mnt"}, ""},
	}
	for _, tt := range tests {
		args, ok := mountHelperArgs(tt.argv)
		if got := strings.Join(args, " "); ok != (tt.want != "") || got != tt.want {
			t.Errorf("mountHelperArgs(%q) = %q, %v; want %q", tt.argv, got, ok, tt.want)
		}
	}
}
