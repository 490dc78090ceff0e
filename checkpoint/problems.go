package checkpoint

// ProblemGroup is the problems of one file with one reason: how many, and
// the tensors the first of them name.
type ProblemGroup struct {
	File    string   `json:"file"`
	Reason  string   `json:"reason"`
	Count   int      `json:"count"`
	Tensors []string `json:"tensors,omitempty"` // at most MaxExamples
}

// Limits of GroupProblems: a hostile index can hold a problem per tensor,
// hundreds of thousands, and a log line or stats.json entry each would
// bury the few that matter.
const (
	MaxExamples      = 5
	MaxProblemGroups = 100
)

// GroupProblems groups ps by file and reason, in the order of their first
// problem, keeping the first MaxExamples tensors named; it returns at most
// MaxProblemGroups groups, and how many problems the groups left off hold.
func GroupProblems(ps []Problem) (groups []ProblemGroup, omitted int) {
	type key struct{ file, reason string }
	at := make(map[key]int)
	for _, p := range ps {
		k := key{p.File, p.Reason}
		i, ok := at[k]
		if !ok {
			if len(groups) == MaxProblemGroups {
				omitted++
				continue
			}
			i = len(groups)
			at[k] = i
			groups = append(groups, ProblemGroup{File: p.File, Reason: p.Reason})
		}
		g := &groups[i]
		g.Count++
		if p.Tensor != "" && len(g.Tensors) < MaxExamples {
			g.Tensors = append(g.Tensors, p.Tensor)
		}
	}
	return groups, omitted
}
