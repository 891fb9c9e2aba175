package httpapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/synchro-sync/synchro/internal/strictjson"
)

// Limits bound what one sync request may ask for.
type Limits struct {
	MaxBodyBytes     int64 // request body cap (413 request_too_large)
	MaxMutations     int   // mutations per push
	MaxPageSize      int   // largest page a pull or rebuild returns (a larger limit is capped)
	MaxPageBytes     int64 // rows of one pull or rebuild page, or of a push answer's applied outcomes, in bytes of their text (at least one row)
	MaxValueBytes    int   // largest column value a push may carry, in bytes of its JSON text (validation_failed)
	DefaultPageSize  int   // page size when the request gives none
	MaxJSONDepth     int   // deepest nesting of objects and arrays in a body
	MaxScopes        int   // scopes per pull or connect
	MaxIdentifierLen int   // client_id, mutation_id, batch_id, scope, table, cursor lengths
}

// DefaultLimits are the limits synchrod uses unless configured otherwise.
var DefaultLimits = Limits{
	MaxBodyBytes: 4 << 20, MaxMutations: 500, MaxPageSize: 1000, MaxPageBytes: 8 << 20, MaxValueBytes: 1 << 20, DefaultPageSize: 500,
	MaxJSONDepth: 32, MaxScopes: 1000, MaxIdentifierLen: 256,
}

// readBody reads a request body as one JSON object within the limits, into v
// (typed: a wrong type is invalid_request). It rejects bodies over the cap (413),
// invalid UTF-8, NUL characters (PostgreSQL text cannot hold them), nesting
// deeper than the limit, trailing data, and a member named like a request field
// but in other case ("Mutations", "BASE_VERSION"): field names are matched
// exactly. Other unknown members are ignored.
func readBody(w http.ResponseWriter, r *http.Request, l Limits, v any) *apiError {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, l.MaxBodyBytes))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return &apiError{Status: http.StatusRequestEntityTooLarge, Code: "request_too_large",
				Message: fmt.Sprintf("request body is larger than %d bytes", l.MaxBodyBytes)}
		}
		var netErr net.Error
		if errors.As(err, &netErr) && netErr.Timeout() {
			w.Header().Set("Connection", "close")
			return &apiError{Status: http.StatusRequestTimeout, Code: "request_timeout",
				Message: "the request body did not arrive in time; retry"}
		}
		return badRequest("could not read the request body")
	}
	if !utf8.Valid(body) {
		return badRequest("request body is not valid UTF-8")
	}
	if err := strictjson.Check(body, l.MaxJSONDepth, l.MaxBodyBytes); err != nil {
		return badRequest("request " + err.Error())
	}
	if err := exactFields(body, reflect.TypeOf(v), ""); err != nil {
		return badRequest(err.Error())
	}
	if err := json.Unmarshal(body, v); err != nil {
		var typeErr *json.UnmarshalTypeError
		if errors.As(err, &typeErr) && typeErr.Field != "" {
			return badRequest(fmt.Sprintf("field %q has the wrong type", typeErr.Field))
		}
		return badRequest("request body does not match the request schema")
	}
	return nil
}

// exactFields fails when an object of body that decodes into a struct of type t
// (or into a struct within it: a slice element, a map value) has a member whose
// name differs from one of the struct's JSON field names only in case.
// encoding/json matches names case-insensitively (with Unicode simple folding:
// "ſcope" is scope) and would take such a member for the field, silently: a
// "Base_Version" would turn a checked update into an unchecked one. A member
// that is no field in any case is left alone (encoding/json ignores it); a
// value of the wrong shape is left to the typed decoding, which reports it.
// path names the object in the message (the real field's name, never what
// the client sent).
func exactFields(body []byte, t reflect.Type, path string) error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if !hasFields(t) {
		return nil
	}
	switch t.Kind() {
	case reflect.Struct:
		var obj map[string]json.RawMessage
		if json.Unmarshal(body, &obj) != nil {
			return nil
		}
		fields := jsonFields(t)
		for _, name := range slices.Sorted(maps.Keys(obj)) {
			if ft, ok := fields[name]; ok {
				if err := exactFields(obj[name], ft, join(path, name)); err != nil {
					return err
				}
				continue
			}
			for _, field := range slices.Sorted(maps.Keys(fields)) {
				if strings.EqualFold(name, field) {
					return fmt.Errorf("a member's name differs from the field %s only in case; field names are case-sensitive", join(path, field))
				}
			}
		}
	case reflect.Slice, reflect.Array:
		var items []json.RawMessage
		if json.Unmarshal(body, &items) != nil {
			return nil
		}
		for i, item := range items {
			if err := exactFields(item, t.Elem(), fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
	case reflect.Map:
		var m map[string]json.RawMessage
		if json.Unmarshal(body, &m) != nil {
			return nil
		}
		for _, k := range slices.Sorted(maps.Keys(m)) {
			if err := exactFields(m[k], t.Elem(), path+"[*]"); err != nil {
				return err
			}
		}
	}
	return nil
}

// hasFields reports whether a value of type t holds a struct somewhere (itself,
// its elements), i.e. whether exactFields has names to check in it.
func hasFields(t reflect.Type) bool {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Struct:
		return true
	case reflect.Slice, reflect.Array, reflect.Map:
		return hasFields(t.Elem())
	}
	return false
}

// jsonFields maps the JSON names of a struct's exported fields to their types.
// The request types have no embedded structs.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	fields := make(map[string]reflect.Type, t.NumField())
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if !f.IsExported() || name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		fields[name] = f.Type
	}
	return fields
}

func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

// identifier checks a required (or optional) identifier field.
func (l Limits) identifier(name, v string, required bool) *apiError {
	switch {
	case v == "" && required:
		return badRequest(fmt.Sprintf("%s is required", name))
	case len(v) > l.MaxIdentifierLen:
		return badRequest(fmt.Sprintf("%s is longer than %d bytes", name, l.MaxIdentifierLen))
	}
	return nil
}

// pageSize is the page size a request gets: the default when it gives none,
// capped at the server's maximum.
func (l Limits) pageSize(limit *int) (int, *apiError) {
	switch {
	case limit == nil:
		return l.DefaultPageSize, nil
	case *limit < 1:
		return 0, badRequest("limit must be at least 1")
	case *limit > l.MaxPageSize:
		return l.MaxPageSize, nil
	}
	return *limit, nil
}
