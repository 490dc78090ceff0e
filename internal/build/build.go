// Package build says which dsfs made a file: the version the documents a
// view generates record (q2/'s plan and README, nvfp4/'s producer), so a
// reader can tell the build that wrote them.
package build

import "runtime/debug"

// Version is this binary's module version and, when it was built from a
// checkout, the first 12 digits of the commit, with "+dirty" when the
// checkout had changes; "unknown" when the binary records neither.
func Version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	return versionOf(bi)
}

func versionOf(bi *debug.BuildInfo) string {
	v := bi.Main.Version
	var rev, dirty string
	for _, s := range bi.Settings {
		switch {
		case s.Key == "vcs.revision":
			rev = s.Value[:min(12, len(s.Value))]
		case s.Key == "vcs.modified" && s.Value == "true":
			dirty = "+dirty"
		}
	}
	if rev != "" {
		v += " " + rev + dirty
	}
	if v == "" {
		return "unknown"
	}
	return v
}
