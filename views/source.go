package views

import "github.com/dsfs/dsfs/vfile"

func buildSource(s *Set, _ string) (Built, error) {
	files := make(map[string]*vfile.Node)
	for _, sh := range s.Cat.Shards {
		files[sh.Name] = sourceNode(sh.Name, sh.File())
	}
	for _, f := range s.Cat.Files {
		n, err := s.sourceFile(f.Name, f.Path)
		if err != nil {
			return Built{}, err
		}
		files[f.Name] = n
	}
	// A bad shard is the user's file: source/ serves it as it is.
	for _, b := range s.Cat.BadShards {
		if b.Size < 0 {
			continue
		}
		n, err := s.sourceFile(b.Name, b.Path)
		if err != nil {
			return Built{}, err
		}
		files[b.Name] = n
	}
	return Built{Root: tree("source", files)}, nil
}
