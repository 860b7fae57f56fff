module github.com/opzero/opzero/examples/postgres

go 1.26.0

require github.com/jackc/pgx/v5 v5.12.0

require (
	github.com/davecgh/go-spew v1.1.2-0.20180830191138-d8f796af33cc // indirect
	github.com/jackc/pgpassfile v1.0.0 // indirect
	github.com/jackc/pgservicefile v0.0.0-20240606120523-5a60cdf6a761 // indirect
	github.com/pmezard/go-difflib v1.0.1-0.20181226105442-5d4384ee4fb2 // indirect
	golang.org/x/text v0.42.0 // indirect
)

replace github.com/opzero/opzero => ../..
