package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"unicode/utf8"
)

// Limits bound what one sync request may ask for.
type Limits struct {
	MaxBodyBytes     int64 // request body cap (413 request_too_large)
	MaxMutations     int   // mutations per push
	MaxPageSize      int   // largest page a pull or rebuild returns (a larger limit is capped)
	DefaultPageSize  int   // page size when the request gives none
	MaxJSONDepth     int   // deepest nesting of objects and arrays in a body
	MaxScopes        int   // scopes per pull or connect
	MaxIdentifierLen int   // client_id, mutation_id, batch_id, scope, table, cursor lengths
}

// DefaultLimits are the limits synchrod uses unless configured otherwise.
var DefaultLimits = Limits{
	MaxBodyBytes: 4 << 20, MaxMutations: 500, MaxPageSize: 1000, DefaultPageSize: 500,
	MaxJSONDepth: 32, MaxScopes: 1000, MaxIdentifierLen: 256,
}

// readBody reads a request body as one JSON object within the limits, into v
// (typed: a wrong type is invalid_request). It rejects bodies over the cap (413),
// invalid UTF-8, NUL characters (PostgreSQL text cannot hold them), nesting
// deeper than the limit, and trailing data.
func readBody(w http.ResponseWriter, r *http.Request, l Limits, v any) *apiError {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, l.MaxBodyBytes))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return &apiError{Status: http.StatusRequestEntityTooLarge, Code: "request_too_large",
				Message: fmt.Sprintf("request body is larger than %d bytes", l.MaxBodyBytes)}
		}
		return badRequest("could not read the request body")
	}
	if !utf8.Valid(body) {
		return badRequest("request body is not valid UTF-8")
	}
	if err := checkJSON(body, l.MaxJSONDepth); err != nil {
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

// checkJSON verifies that body is exactly one JSON object, no deeper than
// maxDepth, with no NUL character in any string.
func checkJSON(body []byte, maxDepth int) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	depth := 0
	first := true
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			return errors.New("request body is not valid JSON")
		}
		if first && tok != json.Delim('{') {
			return errors.New("request body must be a JSON object")
		}
		first = false
		switch t := tok.(type) {
		case json.Delim:
			if t == '{' || t == '[' {
				depth++
				if depth > maxDepth {
					return fmt.Errorf("request body is nested deeper than %d levels", maxDepth)
				}
			} else {
				depth--
			}
		case string:
			if strings.ContainsRune(t, 0) {
				return errors.New("request body contains a NUL character")
			}
		}
		if depth == 0 && dec.More() {
			return errors.New("request body has data after the JSON object")
		}
	}
	if first {
		return errors.New("request body is empty")
	}
	return nil
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
