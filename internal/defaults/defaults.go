// Package defaults fills and checks Config fields: zero means "use the default", and
// a negative value is a validation error that names the field.
package defaults

import (
	"fmt"
	"time"

	"github.com/shardq/shardq/shardqtype"
)

// NonNegative sets *v to def when it is zero, and rejects a negative *v, naming field.
func NonNegative[T int | time.Duration](v *T, def T, field string) error {
	if *v == 0 {
		*v = def
	}
	if *v < 0 {
		return Invalid(field, "%v is negative", *v)
	}
	return nil
}

// Invalid returns a *shardqtype.ValidationError for field.
func Invalid(field, format string, args ...any) error {
	return &shardqtype.ValidationError{Field: field, Reason: fmt.Sprintf(format, args...)}
}
