package sourcefile

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// view returns the n bytes at off as View shows them, copied.
func view(f *File, off int64, n int) ([]byte, error) {
	var got []byte
	err := f.View(off, n, func(b []byte) error {
		got = bytes.Clone(b)
		return nil
	})
	return got, err
}

// writeOpen writes b to a file named name in dir and opens it, until the
// test ends; it returns the File and its path.
func writeOpen(t *testing.T, dir, name string, b []byte) (*File, string) {
	t.Helper()
	p := filepath.Join(dir, name)
	write(t, p, b)
	f, err := Open(p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f, p
}

// bytesObject is an Object of fixed bytes.
type bytesObject struct{ *bytes.Reader }

func (bytesObject) Version() string    { return "v1" }
func (bytesObject) ModTime() time.Time { return time.Time{} }
func (bytesObject) Close() error       { return nil }

func TestView(t *testing.T) {
	dir := t.TempDir()
	mapped, _ := writeOpen(t, dir, "model.safetensors", content)
	unmappable, _ := writeOpen(t, dir, "empty", nil)
	object := FromObject("s3://b/model.safetensors", bytesObject{bytes.NewReader(content)})
	for _, tt := range []struct {
		name string
		f    *File
	}{{"mapped", mapped}, {"object", object}} {
		t.Run(tt.name, func(t *testing.T) {
			for _, r := range [][2]int{{0, len(content)}, {3, 10}, {len(content), 0}} {
				got, err := view(tt.f, int64(r[0]), r[1])
				if err != nil || !bytes.Equal(got, content[r[0]:r[0]+r[1]]) {
					t.Errorf("View(%d, %d) = %q, %v; want %q", r[0], r[1], got, err, content[r[0]:r[0]+r[1]])
				}
			}
			for _, r := range [][2]int{{30, 10}, {-1, 2}, {0, -1}} {
				if got, err := view(tt.f, int64(r[0]), r[1]); err == nil {
					t.Errorf("View(%d, %d) outside the file = %q, no error", r[0], r[1], got)
				}
			}
		})
	}
	if mapped.m.data == nil || unmappable.m.data != nil || object.m.data != nil {
		t.Fatal("the regular file is not mapped, or the empty file or the object is")
	}
	if got, err := view(unmappable, 0, 0); err != nil || len(got) != 0 {
		t.Fatalf("View of an empty file: %q, %v", got, err)
	}
	stop := errors.New("fn's own error")
	if err := mapped.View(0, 4, func([]byte) error { return stop }); err != stop {
		t.Fatalf("View returned %v; want fn's error", err)
	}
	mapped.Close()
	if _, err := view(mapped, 0, 4); err == nil || mapped.m.data != nil {
		t.Fatal("View after Close read the file")
	}
}

// TestViewNestedAndClosed: a View may nest in another of the same file,
// and a Close during a View leaves the bytes it reads mapped until it
// returns, and fails it and every later one.
func TestViewNestedAndClosed(t *testing.T) {
	f, _ := writeOpen(t, t.TempDir(), "model.safetensors", content)
	var outer, inner []byte
	err := f.View(0, 10, func(b []byte) error {
		if err := f.View(10, 10, func(b []byte) error {
			inner = bytes.Clone(b)
			return nil
		}); err != nil {
			return err
		}
		f.Close()
		outer = bytes.Clone(b) // still mapped
		return nil
	})
	if err == nil || !bytes.Equal(outer, content[:10]) || !bytes.Equal(inner, content[10:20]) {
		t.Fatalf("View closed under it: %v, read %q and %q; want an error after reading %q and %q", err, outer, inner, content[:10], content[10:20])
	}
	if f.m.data != nil || f.m.users != 0 {
		t.Fatalf("after the last View of a closed file: mapped %v, %d users", f.m.data != nil, f.m.users)
	}
	if _, err := view(f, 0, 4); err == nil {
		t.Fatal("View after Close read the file")
	}
}

// TestViewOfTruncatedFile truncates a mapped file under a View: the page
// read faults, and the fault is View's error, naming the change, not the
// end of the process.
func TestViewOfTruncatedFile(t *testing.T) {
	page := os.Getpagesize()
	f, p := writeOpen(t, t.TempDir(), "model.safetensors", bytes.Repeat([]byte{7}, 4*page))
	var sum int
	err := f.View(0, 4*page, func(b []byte) error {
		if err := os.Truncate(p, 0); err != nil {
			t.Fatal(err)
		}
		for _, c := range b[2*page:] {
			sum += int(c)
		}
		return nil
	})
	if !errors.Is(err, ErrChanged) || !strings.Contains(err.Error(), "truncated from") {
		t.Fatalf("View of a file truncated under it: %v (read %d); want ErrChanged", err, sum)
	}
	if _, err := view(f, 0, page); !errors.Is(err, ErrChanged) {
		t.Fatalf("View after the change: %v", err)
	}
}

// TestViewFaultIsAnError checks guard alone: a fault in fn is an error
// wrapping errFault, and any other panic goes on.
func TestViewFaultIsAnError(t *testing.T) {
	page := os.Getpagesize()
	f, p := writeOpen(t, t.TempDir(), "model.safetensors", bytes.Repeat([]byte{7}, 2*page))
	f.m.once.Do(f.mapAll)
	data := f.m.data
	if err := os.Truncate(p, 0); err != nil {
		t.Fatal(err)
	}
	var read byte
	err := guard(func() error {
		read = data[page]
		return nil
	})
	if !errors.Is(err, errFault) {
		t.Fatalf("guard of a faulting read: %v (read %d); want errFault", err, read)
	}
	defer func() {
		if r := recover(); r != io.EOF {
			t.Fatalf("guard let through %v; want the panic io.EOF", r)
		}
	}()
	guard(func() error { panic(io.EOF) })
}
