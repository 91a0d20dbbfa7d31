"""`python -m vit.data`: fetch a data set (or check that it is there) and say where it is."""
from vit.data.loading import main

raise SystemExit(main())
