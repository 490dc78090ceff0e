package checkpoint

import (
	"fmt"
	"reflect"
	"testing"
)

func TestGroupProblems(t *testing.T) {
	var stale []Problem
	for i := range 300_000 {
		stale = append(stale, Problem{File: "a.safetensors", Tensor: fmt.Sprintf("t%06d", i), Reason: "listed in the index but not in the shard"})
	}
	var many []Problem
	for i := range MaxProblemGroups + 7 {
		many = append(many, Problem{File: fmt.Sprintf("f%03d", i), Reason: "missing"}, Problem{File: fmt.Sprintf("f%03d", i), Reason: "missing"})
	}
	tests := []struct {
		name    string
		in      []Problem
		groups  int
		first   ProblemGroup
		omitted int
	}{
		{"none", nil, 0, ProblemGroup{}, 0},
		{"one", []Problem{{File: ConfigName, Reason: "missing"}}, 1, ProblemGroup{File: ConfigName, Reason: "missing", Count: 1}, 0},
		{"stale index entries", stale, 1, ProblemGroup{File: "a.safetensors", Reason: "listed in the index but not in the shard", Count: 300_000,
			Tensors: []string{"t000000", "t000001", "t000002", "t000003", "t000004"}}, 0},
		{"more groups than the cap", many, MaxProblemGroups, ProblemGroup{File: "f000", Reason: "missing", Count: 2}, 14},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			groups, omitted := GroupProblems(tt.in)
			if len(groups) != tt.groups || omitted != tt.omitted {
				t.Fatalf("%d groups, %d omitted; want %d, %d", len(groups), omitted, tt.groups, tt.omitted)
			}
			if len(groups) > 0 && !reflect.DeepEqual(groups[0], tt.first) {
				t.Errorf("first group %+v, want %+v", groups[0], tt.first)
			}
			total := omitted
			for _, g := range groups {
				total += g.Count
			}
			if total != len(tt.in) {
				t.Errorf("groups hold %d problems, want %d", total, len(tt.in))
			}
		})
	}
}
