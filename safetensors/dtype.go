// Package safetensors reads and lays out safetensors headers: the parser
// enforces the reference reader's rules, and the layout follows the
// reference serializer's tensor order so that virtual files look exactly
// like files written by the official tools.
package safetensors

// DType is a safetensors element type name as it appears in a header.
type DType string

// The element types the safetensors format defines.
const (
	BOOL       DType = "BOOL"
	U8         DType = "U8"
	I8         DType = "I8"
	F8E5M2     DType = "F8_E5M2"
	F8E4M3     DType = "F8_E4M3"
	F8E8M0     DType = "F8_E8M0"
	F8E4M3FNUZ DType = "F8_E4M3FNUZ"
	F8E5M2FNUZ DType = "F8_E5M2FNUZ"
	F4         DType = "F4"
	F6E2M3     DType = "F6_E2M3"
	F6E3M2     DType = "F6_E3M2"
	I16        DType = "I16"
	U16        DType = "U16"
	F16        DType = "F16"
	BF16       DType = "BF16"
	I32        DType = "I32"
	U32        DType = "U32"
	F32        DType = "F32"
	F64        DType = "F64"
	I64        DType = "I64"
	U64        DType = "U64"
	C64        DType = "C64"
)

// serializerOrder is the reference serializer's dtype order: tensors of an
// earlier dtype come first in the data section.
var serializerOrder = []DType{U64, I64, F64, C64, F32, U32, I32, BF16, F16, U16, I16,
	F8E5M2FNUZ, F8E4M3FNUZ, F8E8M0, F8E4M3, F8E5M2, I8, U8, F6E3M2, F6E2M3, F4, BOOL}

var bitsOf = map[DType]int{
	BOOL: 8, U8: 8, I8: 8, F8E5M2: 8, F8E4M3: 8, F8E8M0: 8, F8E4M3FNUZ: 8, F8E5M2FNUZ: 8,
	F4: 4, F6E2M3: 6, F6E3M2: 6,
	I16: 16, U16: 16, F16: 16, BF16: 16,
	I32: 32, U32: 32, F32: 32,
	F64: 64, I64: 64, U64: 64, C64: 64,
}

var rank = func() map[DType]int {
	m := make(map[DType]int, len(serializerOrder))
	for i, d := range serializerOrder {
		m[d] = i
	}
	return m
}()

// Bits returns the element width in bits, or 0 for an unknown dtype.
func (d DType) Bits() int { return bitsOf[d] }

// Known reports whether d is a dtype the format defines.
func (d DType) Known() bool { return bitsOf[d] != 0 }
