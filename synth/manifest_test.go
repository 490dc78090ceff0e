package synth

import (
	"testing"

	"github.com/dsfs/dsfs/manifest"
)

// TestTinyCatalogs checks that the catalog opens v41-tiny without a
// problem and finds its experts and Engram tables by role.
func TestTinyCatalogs(t *testing.T) {
	dir := writeTiny(t)
	c, err := manifest.Open(dir)
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
	roles := map[manifest.Role]int{}
	for _, tt := range c.Tensors {
		roles[tt.Role]++
	}
	for role, want := range map[manifest.Role]int{
		manifest.RoleRoutedExpert:    6 * 8 * 6,
		manifest.RoleMTPExpert:       3 * 8 * 6,
		manifest.RoleEngram:          4,
		manifest.RoleEngramProj:      8,
		manifest.RoleEmbed:           1,
		manifest.RoleHead:            1,
		manifest.RoleDraftHead:       3,
		manifest.RoleMTPProj:         2,
		manifest.RoleVisionProjector: 4,
		manifest.RoleImageToken:      3,
		manifest.RoleOther:           0,
	} {
		if roles[role] != want {
			t.Errorf("%d tensors of role %s, want %d", roles[role], role, want)
		}
	}
}
