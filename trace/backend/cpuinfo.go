package backend

import (
	"bufio"
	"os"
	"runtime"
	"strings"
	"sync"
)

// cpuModel is the processor's name from /proc/cpuinfo, or the
// architecture where that is not available.
var cpuModel = sync.OnceValue(func() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return runtime.GOARCH
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		k, v, ok := strings.Cut(s.Text(), ":")
		if ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return runtime.GOARCH
})
