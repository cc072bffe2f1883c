/** The package name error messages of the command line start with: `[cli] ...`. */
export const PKG = 'cli';
