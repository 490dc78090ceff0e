package trace

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPromptBounds: a prompt over MaxPromptTokens, or prompts over
// MaxTotalTokens together, give one error naming the file and the prompt.
func TestPromptBounds(t *testing.T) {
	ids := func(n int) []int { return make([]int, n) }
	type pj struct {
		ID       string `json:"id"`
		TokenIDs []int  `json:"token_ids"`
	}
	tests := []struct {
		name    string
		prompts []pj
		err     string
	}{
		{"at the limits", []pj{{"a", ids(MaxPromptTokens)}, {"b", ids(MaxTotalTokens - MaxPromptTokens)}}, ""},
		{"one prompt too long", []pj{{"short", ids(3)}, {"long", ids(MaxPromptTokens + 1)}}, "prompt 2 (long): 4097 tokens, more than the 4096 a prompt may hold"},
		{"32k tokens", []pj{{"huge", ids(32768)}}, "prompt 1 (huge): 32768 tokens"},
		{"too many together", []pj{{"a", ids(MaxPromptTokens)}, {"b", ids(MaxPromptTokens)}, {"c", ids(1)}}, "prompt 3 (c): the prompts up to this one hold 8193 tokens"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, _ := json.Marshal(tt.prompts)
			path := filepath.Join(t.TempDir(), "prompts.json")
			os.WriteFile(path, b, 0o644)
			p, err := LoadPrompts(path)
			if tt.err == "" {
				if err != nil {
					t.Fatal(err)
				}
				if err := Encode(p, nil, 1); err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.err) || !strings.HasPrefix(err.Error(), path+": ") || strings.Count(err.Error(), "\n") != 0 {
				t.Fatalf("error %v, want one line starting %q and containing %q", err, path, tt.err)
			}
		})
	}
	// Prompts built in code are held to the same bounds by Encode.
	p := []Prompt{{ID: "a", TokenIDs: ids(MaxPromptTokens)}, {ID: "b", TokenIDs: ids(MaxPromptTokens)}, {ID: "c", TokenIDs: ids(1)}}
	if err := Encode(p, nil, 1); err == nil || !strings.Contains(err.Error(), "prompt c: the prompts up to this one hold 8193") {
		t.Fatalf("Encode over the total: %v", err)
	}
}
