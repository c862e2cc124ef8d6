from engine.cli.main import exit_after, main

exit_after(main())
