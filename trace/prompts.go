package trace

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"

	"github.com/dsfs/dsfs/tokenizer"
)

// Prompt is one sequence the trace runs. Text prompts are encoded with the
// checkpoint's tokenizer (BOS added as tokenizer_config.json says);
// token-id prompts run as given.
type Prompt struct {
	ID    string `json:"id"`
	Label string `json:"label"`
	// Text is nil for a token-id prompt.
	Text     *string `json:"text,omitempty"`
	TokenIDs []int   `json:"token_ids"`
	// Tokens are the tokenizer's spellings of TokenIDs; nil (JSON null)
	// without a tokenizer.
	Tokens []string `json:"tokens"`
}

// defaultPrompts are the seed's four prompts (trace_v2_lite.py).
var defaultPrompts = []struct{ id, label, text string }{
	{"zh_explanation", "中文解释", "用通俗的语言解释，为什么稀疏专家模型可以拥有很多参数，但每个 token 只使用其中一小部分。"},
	{"en_architecture", "English architecture", "Explain how a compressed key-value latent changes the memory cost of autoregressive decoding."},
	{"code", "Python code", "Write a Python function that returns the first repeated element in a list and explain its complexity."},
	{"math", "数学推理", "若正数 x 满足 x 加上它的倒数等于 3，求 x 的平方加上倒数的平方。"},
}

// DefaultPrompts returns the seed's four text prompts.
func DefaultPrompts() []Prompt {
	out := make([]Prompt, len(defaultPrompts))
	for i, p := range defaultPrompts {
		text := p.text
		out[i] = Prompt{ID: p.id, Label: p.label, Text: &text}
	}
	return out
}

// validID is what a prompt id may be: it names tensors (<id>.attn_out).
var validID = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

// Prompts are bounded by what a layer forward costs. Attention is
// quadratic: the CPU backend computes T² · heads · (2·kv_lora + rope)
// multiply-adds per layer for a prompt of T tokens, 2.3·10¹² for a
// 4096-token prompt on DeepSeek-V3's shapes (seconds per layer on a
// many-core host; 32,768 tokens would be 64 times that). Memory is linear:
// the residual stream entering every layer is kept, tokens · hidden · 4
// bytes per layer, 1.9 GB for 8192 tokens on V2-Lite's 27 layers of 2048
// and 15 GB on V3's 61 layers of 7168.
const (
	// MaxPromptTokens bounds one prompt.
	MaxPromptTokens = 4096
	// MaxTotalTokens bounds all prompts together.
	MaxTotalTokens = 8192
)

// tokenBudget counts prompts' tokens against the bounds.
type tokenBudget struct{ total int }

// add counts a prompt of n tokens; where names it for the error.
func (b *tokenBudget) add(where string, n int) error {
	if n > MaxPromptTokens {
		return fmt.Errorf("%s: %d tokens, more than the %d a prompt may hold", where, n, MaxPromptTokens)
	}
	b.total += n
	if b.total > MaxTotalTokens {
		return fmt.Errorf("%s: the prompts up to this one hold %d tokens, more than the %d all prompts together may hold", where, b.total, MaxTotalTokens)
	}
	return nil
}

// promptJSON is one entry of a prompts file; pointers tell absent from
// empty.
type promptJSON struct {
	ID       *string `json:"id"`
	Label    *string `json:"label"`
	Text     *string `json:"text"`
	TokenIDs *[]int  `json:"token_ids"`
}

// maxPromptsFile bounds a prompts file: MaxTotalTokens of text or ids
// take well under a megabyte.
const maxPromptsFile = 4 << 20

// LoadPrompts reads a prompts file; see ParsePrompts.
func LoadPrompts(path string) ([]Prompt, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxPromptsFile+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(b) > maxPromptsFile {
		return nil, fmt.Errorf("%s: more than %d bytes, larger than any prompts within the limits", path, maxPromptsFile)
	}
	p, err := ParsePrompts(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return p, nil
}

// ParsePrompts reads a JSON list of prompts, each {id, label, text} or
// {id, label, token_ids}. Ids must match [A-Za-z0-9_-]+ and be unique; the
// label may be left out; exactly one of text and token_ids must be given,
// not empty.
func ParsePrompts(data []byte) ([]Prompt, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var raw []promptJSON
	if err := dec.Decode(&raw); err != nil {
		return nil, fmt.Errorf("want a JSON list of {id, label, text | token_ids}: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("trailing data after the list of prompts")
	}
	if len(raw) == 0 {
		return nil, errors.New("no prompts")
	}
	seen := make(map[string]int)
	var budget tokenBudget
	out := make([]Prompt, len(raw))
	for i, r := range raw {
		where := fmt.Sprintf("prompt %d", i+1)
		if r.ID == nil {
			return nil, fmt.Errorf("%s: no id", where)
		}
		id := *r.ID
		if !validID.MatchString(id) {
			return nil, fmt.Errorf("%s: id %q must match [A-Za-z0-9_-]+ (it names tensors such as %q)", where, id, id+".attn_out")
		}
		where = fmt.Sprintf("prompt %d (%s)", i+1, id)
		if j, dup := seen[id]; dup {
			return nil, fmt.Errorf("%s: id already used by prompt %d", where, j)
		}
		seen[id] = i + 1
		p := Prompt{ID: id}
		if r.Label != nil {
			p.Label = *r.Label
		}
		switch {
		case r.Text != nil && r.TokenIDs != nil:
			return nil, fmt.Errorf("%s: give text or token_ids, not both", where)
		case r.Text != nil:
			if *r.Text == "" {
				return nil, fmt.Errorf("%s: empty text", where)
			}
			p.Text = r.Text
		case r.TokenIDs != nil:
			ids := *r.TokenIDs
			if len(ids) == 0 {
				return nil, fmt.Errorf("%s: empty token_ids", where)
			}
			if err := budget.add(where, len(ids)); err != nil {
				return nil, err
			}
			for k, t := range ids {
				if t < 0 {
					return nil, fmt.Errorf("%s: token_ids[%d] = %d is negative", where, k, t)
				}
			}
			p.TokenIDs = ids
		default:
			return nil, fmt.Errorf("%s: give text or token_ids", where)
		}
		out[i] = p
	}
	return out, nil
}

// ErrNoTokenizer is wrapped by Encode's error for a text prompt when it
// has no tokenizer.
var ErrNoTokenizer = errors.New("the checkpoint has no tokenizer.json: give token_ids instead")

// Encode fills in the token ids of text prompts and the token spellings
// of every prompt with tok, and checks each id against the vocabulary
// size and the prompts against MaxPromptTokens and MaxTotalTokens. tok may
// be nil: then text prompts are an error and tokens stay nil.
func Encode(prompts []Prompt, tok *tokenizer.Tokenizer, vocab int) error {
	var budget tokenBudget
	for i := range prompts {
		p := &prompts[i]
		if p.Text != nil {
			if tok == nil {
				return fmt.Errorf("prompt %s is text: %w", p.ID, ErrNoTokenizer)
			}
			var err error
			if p.TokenIDs, err = tok.Encode(*p.Text, true, MaxPromptTokens); err != nil {
				return fmt.Errorf("prompt %s: %w (a prompt may hold %d)", p.ID, err, MaxPromptTokens)
			}
			if len(p.TokenIDs) == 0 {
				return fmt.Errorf("prompt %s: the text encodes to no tokens", p.ID)
			}
		}
		if err := budget.add("prompt "+p.ID, len(p.TokenIDs)); err != nil {
			return err
		}
		for k, id := range p.TokenIDs {
			if id >= vocab {
				return fmt.Errorf("prompt %s: token %d is id %d, outside the model's vocabulary of %d", p.ID, k, id, vocab)
			}
		}
		if tok != nil {
			p.Tokens = make([]string, len(p.TokenIDs))
			for k, id := range p.TokenIDs {
				p.Tokens[k] = tok.Token(id)
			}
		}
	}
	return nil
}
