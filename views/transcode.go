package views

import (
	"github.com/dsfs/dsfs/engramfp4"
	"github.com/dsfs/dsfs/nvfp4"
)

// The transcoding views' rewriters, the engines' transcoders: nvfp4/ and
// engram-fp4/ apply one each, nvfp4+engram-fp4/ both.
var (
	nvfp4Rewrites  = rewrites{"nvfp4", func(s *Set) (Rewriter, error) { return nvfp4.New(s.Cat), nil }}
	engramRewrites = rewrites{"engram-fp4", func(s *Set) (Rewriter, error) { return engramfp4.New(s.Cat), nil }}
)

// nvfp4Transcoder returns the mount's NVFP4 transcoder, the one nvfp4/ and
// nvfp4+engram-fp4/ rewrite with, whose memo of each expert group's global
// exponent manifest/'s descriptions share.
func (s *Set) nvfp4Transcoder() (*nvfp4.Transcoder, error) {
	rw, err := s.rewritten.get(s, nvfp4Rewrites)
	if err != nil {
		return nil, err
	}
	return rw.rw.(*nvfp4.Transcoder), nil
}
