package main

import (
	"log/slog"
	"strings"

	"github.com/dsfs/dsfs/checkpoint"
)

// problemReport is the catalog's problems as logged and as .dsfs/stats.json
// shows them: grouped by file and reason, capped, computed once.
type problemReport struct {
	Total   int                       `json:"total"`
	Groups  []checkpoint.ProblemGroup `json:"groups"`
	Omitted int                       `json:"omitted,omitempty"` // problems in groups past the cap
}

func newProblemReport(ps []checkpoint.Problem) *problemReport {
	groups, omitted := checkpoint.GroupProblems(ps)
	return &problemReport{Total: len(ps), Groups: groups, Omitted: omitted}
}

// log writes one line per group: a lone problem as it is, a group with
// its count and first tensors.
func (r *problemReport) log() {
	for _, g := range r.Groups {
		if g.Count == 1 {
			tensor := ""
			if len(g.Tensors) > 0 {
				tensor = g.Tensors[0]
			}
			slog.Warn("bad input", "file", g.File, "tensor", tensor, "reason", g.Reason)
			continue
		}
		examples := strings.Join(g.Tensors, " ")
		if len(g.Tensors) < g.Count && examples != "" {
			examples += " ..."
		}
		slog.Warn("bad input", "file", g.File, "count", g.Count, "tensors", examples, "reason", g.Reason)
	}
	if r.Omitted > 0 {
		slog.Warn("bad input: more problems not logged", "problems", r.Omitted, "total", r.Total)
	}
}
