package views

import (
	"fmt"
	"syscall"
	"time"

	"github.com/dsfs/dsfs/checkpoint"
	"github.com/dsfs/dsfs/vfile"
)

// readOnlyPerm is the permission bits a view may show: no write bits, no
// set-id or sticky bits.
const readOnlyPerm = 0o555

// attrOf is the attributes of a source file or directory as the catalog
// states it (stat(2), symbolic links followed, as the views open them).
func (s *Set) attrOf(p string) (vfile.Attr, error) {
	fi, err := s.Cat.Stat(p)
	if err != nil {
		return vfile.Attr{}, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return vfile.Attr{}, fmt.Errorf("%s: no stat_t", p)
	}
	return vfile.Attr{
		Perm:  uint32(fi.Mode().Perm()) & readOnlyPerm,
		Uid:   st.Uid,
		Gid:   st.Gid,
		Mtime: fi.ModTime(),
		Ctime: time.Unix(st.Ctim.Sec, st.Ctim.Nsec),
	}, nil
}

// combine is the attributes of a file made from sources with attributes
// as: the permission bits every source grants and the newest times. When
// the sources differ in owner the file belongs to root (only root, which
// the kernel lets read anything, gets the owner's bits); when they differ
// in group it belongs to group root and its group bits are cut to what
// every source grants others, since a member of one source's group may not
// be in another's. So no user reads a derived file who could not read each
// of its sources.
func combine(as ...vfile.Attr) vfile.Attr {
	if len(as) == 0 {
		return vfile.Attr{}
	}
	out := as[0]
	mixedUid, mixedGid := false, false
	for _, a := range as[1:] {
		out.Perm &= a.Perm
		mixedUid = mixedUid || a.Uid != out.Uid
		mixedGid = mixedGid || a.Gid != out.Gid
		if a.Mtime.After(out.Mtime) {
			out.Mtime = a.Mtime
		}
		if a.Ctime.After(out.Ctime) {
			out.Ctime = a.Ctime
		}
	}
	if mixedUid {
		out.Uid = 0
	}
	if mixedGid {
		out.Gid = 0
		group := (out.Perm >> 3) & out.Perm & 0o7
		out.Perm = out.Perm&^0o070 | group<<3
	}
	return out
}

// setAttrs gives every node of the tree its attributes: a directory those
// of the checkpoint directory, a file the combination of its sources (all
// of the checkpoint's files when the node names none). A source that
// cannot be stat'ed counts as owned by root with no permissions, and is
// reported.
func (s *Set) setAttrs() {
	stats := make(map[string]vfile.Attr)
	stat := func(p string) vfile.Attr {
		if a, ok := stats[p]; ok {
			return a
		}
		a, err := s.attrOf(p)
		if err != nil {
			s.warnings = append(s.warnings, fmt.Sprintf("%v: served to root only", err))
		}
		stats[p] = a
		return a
	}
	dir := stat(s.Cat.Dir)
	var every []vfile.Attr
	for _, sh := range s.Cat.Shards {
		every = append(every, stat(sh.Path))
	}
	for _, f := range s.Cat.Files {
		every = append(every, stat(f.Path))
	}
	whole := combine(every...)
	s.Root.Walk(func(_ string, n *vfile.Node) error {
		switch {
		case n.IsDir():
			n.Attr = dir
		case n.From == nil:
			n.Attr = whole
		default:
			as := make([]vfile.Attr, len(n.From))
			for i, p := range n.From {
				as[i] = stat(p)
			}
			n.Attr = combine(as...)
		}
		return nil
	})
}

// shardSources are the source files a file derived from one shard is made
// from: the shard, and config.json, which names the tensors' roles.
func (s *Set) shardSources(sh *checkpoint.Shard) []string {
	from := []string{sh.Path}
	for _, f := range s.Cat.Files {
		if f.Name == checkpoint.ConfigName {
			from = append(from, f.Path)
		}
	}
	return from
}

// SourceBytes is the size of the checkpoint's files (shards and the rest),
// which the mount reports as its size to statfs (df).
func (s *Set) SourceBytes() int64 {
	var n int64
	for _, sh := range s.Cat.Shards {
		n += sh.Size
	}
	for _, f := range s.Cat.Files {
		n += f.Size
	}
	return n
}
