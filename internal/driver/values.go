package driver

import (
	"unsafe"

	"github.com/google/uuid"
)

// The store binds and scans uuid.UUID; each driver marshals only its own UUID type, U
// below. Both are 16 bytes, so a pointer to one is a pointer to the other, and a map or
// slice of one is copied into a map or slice of the other.

// Args returns args with every uuid.UUID (alone, behind a pointer, or in a slice or a
// map's values) given as U. args is not changed.
func Args[U ~[16]byte](args []any) []any {
	var out []any
	for i, a := range args {
		c, ok := arg[U](a)
		if !ok {
			continue
		}
		if out == nil {
			out = append([]any(nil), args...)
		}
		out[i] = c
	}
	if out == nil {
		return args
	}
	return out
}

func arg[U ~[16]byte](a any) (any, bool) {
	switch v := a.(type) {
	case uuid.UUID:
		return U(v), true
	case *uuid.UUID:
		return (*U)(unsafe.Pointer(v)), true
	case []uuid.UUID:
		out := make([]U, len(v))
		for i, id := range v {
			out[i] = U(id)
		}
		return out, true
	case map[int8]uuid.UUID:
		return mapOf[int8, U](v), true
	case map[int]uuid.UUID:
		return mapOf[int, U](v), true
	}
	return nil, false
}

func mapOf[K comparable, U ~[16]byte, V ~[16]byte](in map[K]V) map[K]U {
	if in == nil {
		return nil
	}
	out := make(map[K]U, len(in))
	for k, v := range in {
		out[k] = U(v)
	}
	return out
}

// Dests returns dest with every destination of uuid.UUID values (as Args takes them)
// replaced by one of U, and a func that copies what a scan into those left in their
// places. dest is not changed.
func Dests[U ~[16]byte](dest []any) (out []any, copyBack func()) {
	var fixes []func()
	for i, d := range dest {
		var c any
		switch v := d.(type) {
		case *uuid.UUID:
			c = (*U)(unsafe.Pointer(v))
		case **uuid.UUID:
			c = (**U)(unsafe.Pointer(v))
		case *[]uuid.UUID:
			tmp := new([]U)
			c = tmp
			fixes = append(fixes, func() {
				*v = nil
				for _, id := range *tmp {
					*v = append(*v, uuid.UUID(id))
				}
			})
		case *map[int8]uuid.UUID:
			tmp := new(map[int8]U)
			c = tmp
			fixes = append(fixes, func() { *v = mapOf[int8, uuid.UUID](*tmp) })
		case *map[int]uuid.UUID:
			tmp := new(map[int]U)
			c = tmp
			fixes = append(fixes, func() { *v = mapOf[int, uuid.UUID](*tmp) })
		default:
			continue
		}
		if out == nil {
			out = append([]any(nil), dest...)
		}
		out[i] = c
	}
	if out == nil {
		return dest, func() {}
	}
	return out, func() {
		for _, f := range fixes {
			f()
		}
	}
}

// Row converts the values of U in a row a driver scanned by column name (alone, or as a
// map's values) to uuid.UUID.
func Row[U ~[16]byte](row map[string]any) {
	for k, v := range row {
		switch v := v.(type) {
		case U:
			row[k] = uuid.UUID(v)
		case []U:
			ids := make([]uuid.UUID, len(v))
			for i, id := range v {
				ids[i] = uuid.UUID(id)
			}
			row[k] = ids
		case map[int8]U:
			row[k] = mapOf[int8, uuid.UUID](v)
		case map[int]U:
			row[k] = mapOf[int, uuid.UUID](v)
		}
	}
}
