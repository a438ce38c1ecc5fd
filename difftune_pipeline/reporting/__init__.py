"""What users read: comparisons, figures and the HTML report."""
