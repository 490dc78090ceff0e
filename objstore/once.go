package objstore

import (
	"io"
)

// ReadOnceAt reads like ReadAt, for bytes its caller reads once and keeps
// (a safetensors header, config.json at mount): chunks the cache holds
// are served from it, and otherwise the bytes are fetched with one range
// GET of exactly them, which is not cached and does not move the
// read-ahead. So opening a checkpoint of many shards costs each shard its
// header's few hundred kilobytes, not a chunk.
func (o *Object) ReadOnceAt(p []byte, off int64) (int, error) {
	if err := o.readable(off); err != nil {
		return 0, err
	}
	end := min(off+int64(len(p)), o.size)
	cached := true
	for ci := off / ChunkSize; ci <= (end-1)/ChunkSize && cached; ci++ {
		cached = o.b.cache.has(o.chunkName(ci))
	}
	var err error
	if cached {
		for pos := off; pos < end && err == nil; {
			ci := pos / ChunkSize
			m := min(end, (ci+1)*ChunkSize) - pos
			err = o.readChunk(ci, pos-ci*ChunkSize, p[pos-off:pos-off+m])
			pos += m
		}
	} else {
		var data []byte
		if data, err = o.getRange(off, end-off); err == nil {
			copy(p, data)
			o.b.stats.miss.Add(end - off)
		}
	}
	if err != nil {
		return 0, err
	}
	if end-off < int64(len(p)) {
		return int(end - off), io.EOF
	}
	return len(p), nil
}
