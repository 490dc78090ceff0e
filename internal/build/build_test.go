package build

import (
	"runtime/debug"
	"testing"
)

func TestVersionOf(t *testing.T) {
	for _, tc := range []struct {
		main     string
		settings map[string]string
		want     string
	}{
		{"", nil, "unknown"},
		{"(devel)", nil, "(devel)"},
		{"v1.2.3", map[string]string{"vcs.revision": "0123456789abcdef0123"}, "v1.2.3 0123456789ab"},
		{"(devel)", map[string]string{"vcs.revision": "abc", "vcs.modified": "true"}, "(devel) abc+dirty"},
		{"(devel)", map[string]string{"vcs.revision": "abc", "vcs.modified": "false"}, "(devel) abc"},
	} {
		bi := &debug.BuildInfo{Main: debug.Module{Version: tc.main}}
		for k, v := range tc.settings {
			bi.Settings = append(bi.Settings, debug.BuildSetting{Key: k, Value: v})
		}
		if got := versionOf(bi); got != tc.want {
			t.Errorf("versionOf(%q, %v) = %q, want %q", tc.main, tc.settings, got, tc.want)
		}
	}
}
