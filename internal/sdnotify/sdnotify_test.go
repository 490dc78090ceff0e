package sdnotify

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"
)

func TestNotify(t *testing.T) {
	for _, name := range []string{
		filepath.Join(t.TempDir(), "notify"),
		fmt.Sprintf("@dsfs-sdnotify-test-%d", os.Getpid()),
	} {
		l, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: name, Net: "unixgram"})
		if err != nil {
			t.Fatal(err)
		}
		t.Setenv("NOTIFY_SOCKET", name)
		if sent, err := Notify(Ready); !sent || err != nil {
			t.Fatalf("Notify to %s: sent %v, %v", name, sent, err)
		}
		buf := make([]byte, 64)
		n, err := l.Read(buf)
		l.Close()
		if err != nil || string(buf[:n]) != Ready {
			t.Fatalf("socket %s got %q, %v; want %q", name, buf[:n], err, Ready)
		}
	}
	t.Setenv("NOTIFY_SOCKET", "")
	if sent, err := Notify(Ready); sent || err != nil {
		t.Fatalf("Notify without NOTIFY_SOCKET: sent %v, %v", sent, err)
	}
}
