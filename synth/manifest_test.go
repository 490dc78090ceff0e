package synth

import (
	"testing"

	"github.com/dsfs/dsfs/checkpoint"
)

// TestTinyCatalogs checks that the catalog opens v41-tiny without a
// problem and finds its experts and Engram tables by role.
func TestTinyCatalogs(t *testing.T) {
	dir := writeTiny(t)
	c, err := checkpoint.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if len(c.Problems) != 0 {
		t.Errorf("problems: %v", c.Problems)
	}
	ix := openCheckpoint(t, dir).index
	if len(c.Tensors) != len(ix.WeightMap) {
		t.Errorf("catalog holds %d tensors, the index %d", len(c.Tensors), len(ix.WeightMap))
	}
	roles := map[checkpoint.Role]int{}
	for _, tt := range c.Tensors {
		roles[tt.Role]++
	}
	for role, want := range map[checkpoint.Role]int{
		checkpoint.RoleRoutedExpert:    6 * 8 * 6,
		checkpoint.RoleMTPExpert:       3 * 8 * 6,
		checkpoint.RoleEngram:          4,
		checkpoint.RoleEngramProj:      8,
		checkpoint.RoleEmbed:           1,
		checkpoint.RoleHead:            1,
		checkpoint.RoleDraftHead:       3,
		checkpoint.RoleMTPProj:         2,
		checkpoint.RoleVisionProjector: 4,
		checkpoint.RoleImageToken:      3,
		checkpoint.RoleOther:           0,
	} {
		if roles[role] != want {
			t.Errorf("%d tensors of role %s, want %d", roles[role], role, want)
		}
	}
}
