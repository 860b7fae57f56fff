package controller

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/jackc/pgx/v5"
)

// identifier is what the operator accepts as a database, role or extension
// name: a lower-case unquoted PostgreSQL identifier. PostgreSQL itself
// would accept more when quoted, but it silently truncates names past 63
// bytes (two Databases could then name one database), refuses role names
// starting with pg_ and keeps its own databases; the conservative rule
// makes every accepted name mean one thing, in SQL and in psql alike.
var identifier = regexp.MustCompile(`^[a-z_][a-z0-9_]*$`)

// reserved are databases and roles PostgreSQL has or keeps for itself.
var reserved = map[string]bool{"postgres": true, "template0": true, "template1": true, "public": true}

// DatabaseNameFor is the database (and role) name a Database asks for:
// spec.databaseName, else its name with "-" and "." made "_".
func DatabaseNameFor(specName, objName string) string {
	if specName != "" {
		return specName
	}
	return strings.NewReplacer("-", "_", ".", "_").Replace(objName)
}

// CheckName says why PostgreSQL would refuse or misread name, or nil.
func CheckName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("the name is empty")
	case len(name) > 63:
		return fmt.Errorf("%q is %d bytes: PostgreSQL keeps at most 63 (NAMEDATALEN-1) and would truncate it", name, len(name))
	case !identifier.MatchString(name):
		return fmt.Errorf("%q is not a lower-case PostgreSQL identifier: use a-z, 0-9 and _, not starting with a digit", name)
	case strings.HasPrefix(name, "pg_"):
		return fmt.Errorf("%q starts with pg_, which PostgreSQL reserves for its own roles", name)
	case reserved[name]:
		return fmt.Errorf("%q is PostgreSQL's own", name)
	}
	return nil
}

func quoteIdent(s string) string { return pgx.Identifier{s}.Sanitize() }

func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }
