package tokenizer

import (
	"strings"
	"sync"
)

// merge is what a merge rule makes of a pair: its rank (position in the
// merges list) and the id of the merged token.
type merge struct{ rank, id int32 }

func pairKey(a, b int32) uint64 { return uint64(uint32(a))<<32 | uint64(uint32(b)) }

// bpe is the BPE model over the byte alphabet.
type bpe struct {
	merges map[uint64]merge
	// byteID is the id of each byte's one-character token, -1 if the
	// vocabulary lacks it.
	byteID [256]int32
	// whole maps the bytes of each vocabulary token to its id; set only
	// when ignore_merges lets a whole pre-token bypass the merges.
	whole   map[string]int32
	unk     int32 // -1 without an unk_token
	fuseUnk bool
	cache   wordCache
}

// symbol is one token of a word being merged, in a linked list.
type symbol struct {
	id         int32
	prev, next int32 // -1 at the ends
	gone       bool  // merged into its left neighbour
}

// mergeItem is a candidate merge of the symbol at pos with its successor.
type mergeItem struct{ rank, pos, id int32 }

func (a mergeItem) less(b mergeItem) bool {
	return a.rank < b.rank || (a.rank == b.rank && a.pos < b.pos)
}

// bpeScratch holds buffers reused across the words of one Encode call.
type bpeScratch struct {
	syms []symbol
	heap []mergeItem
}

// encode appends the ids of word (raw bytes of one pre-token) to dst.
func (m *bpe) encode(sc *bpeScratch, dst []int, word string) []int {
	if ids, ok := m.cache.get(word); ok {
		return append(dst, ids...)
	}
	n := len(dst)
	dst = m.merge(sc, dst, word)
	m.cache.put(word, dst[n:])
	return dst
}

// merge runs tokenizers' Word::merge_all: the candidate pair with the
// lowest rank (then the leftmost) merges first, and the pairs it forms with
// its neighbours become candidates. A stale candidate is recognised, as
// there, by its pair no longer yielding the same token.
func (m *bpe) merge(sc *bpeScratch, dst []int, word string) []int {
	if m.whole != nil {
		if id, ok := m.whole[word]; ok {
			return append(dst, int(id))
		}
	}
	syms := sc.syms[:0]
	add := func(id int32) {
		i := int32(len(syms))
		if i > 0 {
			syms[i-1].next = i
		}
		syms = append(syms, symbol{id: id, prev: i - 1, next: -1})
	}
	// Characters outside the vocabulary become unk_token (runs of them one
	// unk_token with fuse_unk) or, without one, vanish, as in tokenizers.
	pendingUnk := false
	for i := 0; i < len(word); i++ {
		if id := m.byteID[word[i]]; id >= 0 {
			if pendingUnk {
				add(m.unk)
				pendingUnk = false
			}
			add(id)
			continue
		}
		if m.unk < 0 {
			continue
		}
		if pendingUnk && !m.fuseUnk {
			add(m.unk)
		}
		pendingUnk = true
	}
	if pendingUnk {
		add(m.unk)
	}

	h := sc.heap[:0]
	for i := 0; i+1 < len(syms); i++ {
		if mg, ok := m.merges[pairKey(syms[i].id, syms[i+1].id)]; ok {
			h = heapPush(h, mergeItem{mg.rank, int32(i), mg.id})
		}
	}
	for len(h) > 0 {
		var top mergeItem
		top, h = heapPop(h)
		cur := &syms[top.pos]
		if cur.gone || cur.next < 0 {
			continue
		}
		right := syms[cur.next]
		if mg, ok := m.merges[pairKey(cur.id, right.id)]; !ok || mg.id != top.id {
			continue
		}
		cur.id = top.id
		syms[cur.next].gone = true
		cur.next = right.next
		if right.next >= 0 {
			syms[right.next].prev = top.pos
		}
		if cur.prev >= 0 {
			if mg, ok := m.merges[pairKey(syms[cur.prev].id, cur.id)]; ok {
				h = heapPush(h, mergeItem{mg.rank, cur.prev, mg.id})
			}
		}
		if cur.next >= 0 {
			if mg, ok := m.merges[pairKey(cur.id, syms[cur.next].id)]; ok {
				h = heapPush(h, mergeItem{mg.rank, top.pos, mg.id})
			}
		}
	}
	for i := range syms {
		if !syms[i].gone {
			dst = append(dst, int(syms[i].id))
		}
	}
	sc.syms, sc.heap = syms, h
	return dst
}

func heapPush(h []mergeItem, it mergeItem) []mergeItem {
	h = append(h, it)
	for i := len(h) - 1; i > 0; {
		p := (i - 1) / 2
		if !h[i].less(h[p]) {
			break
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
	return h
}

func heapPop(h []mergeItem) (mergeItem, []mergeItem) {
	top := h[0]
	last := len(h) - 1
	h[0] = h[last]
	h = h[:last]
	for i := 0; ; {
		l, small := 2*i+1, i
		if l < len(h) && h[l].less(h[small]) {
			small = l
		}
		if r := l + 1; r < len(h) && h[r].less(h[small]) {
			small = r
		}
		if small == i {
			break
		}
		h[i], h[small] = h[small], h[i]
		i = small
	}
	return top, h
}

// Cache bounds: words longer than maxCachedWord bytes are not cached (long
// words are rare and would dominate memory), and each of the two
// generations holds at most cacheGeneration words.
const (
	maxCachedWord   = 256
	cacheGeneration = 1 << 14
)

// wordCache memoises the ids of pre-tokens. It keeps two generations: when
// the current one fills it becomes the old one and the previous old one is
// dropped, and a hit in the old generation moves the word forward. That
// approximates LRU without per-entry bookkeeping.
type wordCache struct {
	mu       sync.Mutex
	cur, old map[string][]int
}

func (c *wordCache) get(word string) ([]int, bool) {
	if len(word) > maxCachedWord {
		return nil, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if ids, ok := c.cur[word]; ok {
		return ids, true
	}
	ids, ok := c.old[word]
	if ok {
		c.putLocked(strings.Clone(word), ids)
	}
	return ids, ok
}

func (c *wordCache) put(word string, ids []int) {
	if len(word) > maxCachedWord {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.putLocked(strings.Clone(word), append([]int(nil), ids...))
}

func (c *wordCache) putLocked(word string, ids []int) {
	if c.cur == nil || len(c.cur) >= cacheGeneration {
		c.old, c.cur = c.cur, make(map[string][]int)
	}
	c.cur[word] = ids
}
