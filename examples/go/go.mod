module dlpackshim.example/go

go 1.19
