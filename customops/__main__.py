from customops.cli import main

raise SystemExit(main())
