"""Reports: plots and one self-contained HTML page, built from result files only."""
