package main

import (
	"regexp"
	"strings"
	"testing"
)

func TestPrintProgress(t *testing.T) {
	prev := &mountStatus{Uptime: 10, ViewBlocks: map[string]viewProgress{
		"q2": {Blocks: 100, Computed: 20}, "nvfp4": {Blocks: 8, Computed: 8}, "trace": {Blocks: 40, Computed: 4},
	}}
	cur := &mountStatus{Uptime: 12, ViewBlocks: map[string]viewProgress{
		"q2": {Blocks: 100, Computed: 40, Cached: 30}, "nvfp4": {Blocks: 8, Computed: 8, Cached: 8},
		"trace": {Blocks: 40, Computed: 4, Cached: 1}, "source": {},
	}}
	var b strings.Builder
	if n := printProgress(&b, prev, cur, false); n != 4 {
		t.Errorf("%d lines written, want 4", n)
	}
	want := []string{
		"nvfp4/  100% [BAR] (8/8) computed, 8 cached, 0 to go, done",
		"q2/      40% [BAR] (40/100) computed, 30 cached, 60 to go, 10.0 blocks/s, ETA 6s",
		"source/ nothing to compute (served from the source or generated whole)",
		"trace/   10% [BAR] (4/40) computed, 1 cached, 36 to go, idle (nothing reads it now)",
	}
	// The bar is progressbar's drawing: 24 characters of it.
	got := regexp.MustCompile(`\[[=>.]{24}\]`).ReplaceAllString(strings.TrimSuffix(b.String(), "\n"), "[BAR]")
	if got != strings.Join(want, "\n") {
		t.Errorf("got\n%s\nwant\n%s", b.String(), strings.Join(want, "\n"))
	}
	if allComputed(cur) || !allComputed(&mountStatus{ViewBlocks: map[string]viewProgress{"nvfp4": cur.ViewBlocks["nvfp4"]}}) {
		t.Error("allComputed")
	}
}
