package vfs

import "testing"

func TestIsMountPoint(t *testing.T) {
	for _, tc := range []struct {
		dir  string
		want bool
	}{
		{"/proc", true},
		{"/proc/self", false},
		{t.TempDir(), false},
	} {
		if got, err := IsMountPoint(tc.dir); err != nil || got != tc.want {
			t.Errorf("IsMountPoint(%s) = %v, %v; want %v", tc.dir, got, err, tc.want)
		}
	}
}

func TestUnescapeMountinfo(t *testing.T) {
	for in, want := range map[string]string{`/a\040b`: "/a b", `/plain`: "/plain", `/x\0`: `/x\0`, `/t\011ab`: "/t\tab"} {
		if got := unescapeMountinfo(in); got != want {
			t.Errorf("unescapeMountinfo(%q) = %q, want %q", in, got, want)
		}
	}
}
