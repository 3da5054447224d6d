module dra-conformance.local/pause

go 1.24
